package gateway

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/lucius-platform/lucius/base/loop"
	"github.com/lucius-platform/lucius/base/server"
	"github.com/lucius-platform/lucius/base/telemetry"
	"github.com/lucius-platform/lucius/bus/routing"
	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
	"github.com/lucius-platform/lucius/core/ledger"
)

// watchHub feeds every WatchJob stream of this gateway from one query per
// interval over all the jobs being watched (none while nobody watches): a
// thousand idle watchers cost the database what one does.
type watchHub struct {
	store    *ledger.Store
	interval time.Duration
	log      *slog.Logger
	mu       sync.Mutex
	watches  map[string]map[*jobWatch]struct{} // by job id
	tenants  map[*tenantWatch]struct{}
}

// tenantWatch is one WatchJobs stream: the job-level events of some
// tenants' jobs (all when tenants is nil).
type tenantWatch struct {
	tenants map[string]bool
	// floor is where the stream started: nothing at or below it is sent
	// (the client has it, or asked for what came later).
	floor, after int64
	// sent remembers the ids sent at or below after that a late commit may
	// still surface (see watchLookback).
	sent   map[int64]bool
	events chan []ledger.Event // as jobWatch.events
}

// watchLookback: event ids are taken in transactions that commit in any
// order, so an id below one already read may commit later. Tenant streams
// read this many ids behind their cursor again, and skip what they sent.
const watchLookback = 500

// jobWatch is one stream's place in its job's events.
type jobWatch struct {
	jobID string
	after int64
	// events delivers batches in order; closed when the watcher fell too
	// far behind.
	events chan []ledger.Event
}

const (
	watchInterval = 100 * time.Millisecond
	watchBatch    = 1000 // events one query reads
	watchBuffer   = 64   // batches a stream may fall behind before it is dropped
)

func newWatchHub(store *ledger.Store, log *slog.Logger) *watchHub {
	return &watchHub{store: store, interval: watchInterval, log: log, watches: map[string]map[*jobWatch]struct{}{},
		tenants: map[*tenantWatch]struct{}{}}
}

func (h *watchHub) add(jobID string, after int64) *jobWatch {
	w := &jobWatch{jobID: jobID, after: after, events: make(chan []ledger.Event, watchBuffer)}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.watches[jobID] == nil {
		h.watches[jobID] = map[*jobWatch]struct{}{}
	}
	h.watches[jobID][w] = struct{}{}
	return w
}

func (h *watchHub) remove(w *jobWatch) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.watches[w.jobID], w)
	if len(h.watches[w.jobID]) == 0 {
		delete(h.watches, w.jobID)
	}
}

func (h *watchHub) addTenants(tenants []string, after int64) *tenantWatch {
	w := &tenantWatch{floor: after, after: after, sent: map[int64]bool{}, events: make(chan []ledger.Event, watchBuffer)}
	if tenants != nil {
		w.tenants = map[string]bool{}
		for _, t := range tenants {
			w.tenants[t] = true
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.tenants[w] = struct{}{}
	return w
}

func (h *watchHub) removeTenants(w *tenantWatch) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.tenants, w)
}

// run reads and hands out new events until ctx ends.
func (h *watchHub) run(ctx context.Context) {
	loop.Every(ctx, h.interval, false, func(ctx context.Context) {
		for full := true; full; {
			full = h.round(ctx) == watchBatch // a full batch: read on at once
		}
		h.tenantRound(ctx)
	})
}

// tenantRound reads the job-level events every tenant stream waits for in
// one query, and hands each stream its own.
func (h *watchHub) tenantRound(ctx context.Context) {
	h.mu.Lock()
	if len(h.tenants) == 0 {
		h.mu.Unlock()
		return
	}
	from, all := int64(-1), false
	var tenants []string
	for w := range h.tenants {
		if from < 0 || w.after < from {
			from = w.after
		}
		if w.tenants == nil {
			all = true
		}
		for t := range w.tenants {
			tenants = append(tenants, t)
		}
	}
	h.mu.Unlock()
	if all {
		tenants = nil
	}
	events, err := h.store.EventsOfTenants(ctx, max(0, from-watchLookback), tenants, watchBatch)
	if err != nil {
		if ctx.Err() == nil {
			h.log.WarnContext(ctx, "watch: read tenant events", telemetry.Err(err))
		}
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for w := range h.tenants {
		var mine []ledger.Event
		for _, e := range events {
			if (w.tenants == nil || w.tenants[e.Tenant]) && e.ID > max(w.floor, w.after-watchLookback) && !w.sent[e.ID] {
				mine = append(mine, e.Event)
			}
		}
		if len(mine) == 0 {
			continue
		}
		if !offer(w.events, mine) {
			delete(h.tenants, w)
			continue
		}
		for _, e := range mine {
			w.sent[e.ID] = true
			w.after = max(w.after, e.ID)
		}
		for id := range w.sent { // forget what no lookback reaches any more
			if id <= w.after-watchLookback {
				delete(w.sent, id)
			}
		}
	}
}

// offer hands a stream its batch, or closes its channel when the stream
// has fallen watchBuffer batches behind: its handler then ends it
// (WATCH_BEHIND) and the client resumes from its last event.
func offer(events chan []ledger.Event, batch []ledger.Event) bool {
	select {
	case events <- batch:
		return true
	default:
		close(events)
		return false
	}
}

// round reads once and returns how many events it read.
func (h *watchHub) round(ctx context.Context) int {
	h.mu.Lock()
	after := make(map[string]int64, len(h.watches))
	for job, ws := range h.watches {
		for w := range ws {
			if a, ok := after[job]; !ok || w.after < a {
				after[job] = w.after
			}
		}
	}
	h.mu.Unlock()
	if len(after) == 0 {
		return 0
	}
	events, err := h.store.EventsAfter(ctx, after, watchBatch)
	if err != nil {
		if ctx.Err() == nil {
			h.log.WarnContext(ctx, "watch: read events", telemetry.Err(err))
		}
		return 0
	}
	byJob := map[string][]ledger.Event{}
	for _, e := range events {
		byJob[e.JobID] = append(byJob[e.JobID], e)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for job, evs := range byJob {
		for w := range h.watches[job] {
			var mine []ledger.Event
			for _, e := range evs {
				if e.ID > w.after {
					mine = append(mine, e)
				}
			}
			if len(mine) == 0 {
				continue
			}
			if offer(w.events, mine) {
				w.after = mine[len(mine)-1].ID
			} else {
				delete(h.watches[job], w)
			}
		}
		if len(h.watches[job]) == 0 {
			delete(h.watches, job)
		}
	}
	return len(events)
}

// WatchJob streams the job, then its events as they commit, until it ends.
func (s *jobService) WatchJob(req *luciusv1.WatchJobRequest, stream luciusv1.JobService_WatchJobServer) error {
	ctx := stream.Context()
	id := req.GetJobId()
	job, err := visibleJob(ctx, s.store, id)
	if err != nil {
		return s.storeError(ctx, err, id)
	}
	if err := stream.Send(&luciusv1.WatchJobResponse{Job: jobToProto(job)}); err != nil {
		return err
	}
	after := req.GetAfterEventId()
	if after == 0 {
		if job.Status.Terminal() {
			return nil // ended already, and the client asked for nothing before now
		}
		if after, err = s.store.LastEventID(ctx, id); err != nil {
			return s.storeError(ctx, err, id)
		}
	}
	if job.Status.Terminal() {
		// Ended already: what a resuming client missed, then the end.
		events, err := s.store.ListEvents(ctx, id, after, watchBatch)
		if err != nil {
			return s.storeError(ctx, err, id)
		}
		for _, e := range events {
			if err := stream.Send(&luciusv1.WatchJobResponse{Event: eventToProto(e)}); err != nil {
				return err
			}
		}
		return nil
	}
	w := s.watch.add(id, after)
	defer s.watch.remove(w)
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case batch, ok := <-w.events:
			if !ok {
				return server.Error(codes.Aborted, luciusv1.ErrorReason_ERROR_REASON_WATCH_BEHIND,
					"the stream fell behind; watch again with after_event_id set to the last event_id received", "job_id", id).Err()
			}
			for _, e := range batch {
				resp := &luciusv1.WatchJobResponse{Event: eventToProto(e)}
				ended := false
				if e.Type == ledger.EventJobStatusChanged {
					if job, err = visibleJob(ctx, s.store, id); err != nil {
						return s.storeError(ctx, err, id)
					}
					resp.Job = jobToProto(job)
					ended = ledger.JobStatus(e.ToStatus).Terminal()
				}
				if err := stream.Send(resp); err != nil {
					return err
				}
				if ended {
					return nil
				}
			}
		}
	}
}

// WatchJobs streams the job-level events of a tenant's jobs (or of every
// job the caller may see) as they commit, each with its job.
func (s *jobService) WatchJobs(req *luciusv1.WatchJobsRequest, stream luciusv1.JobService_WatchJobsServer) error {
	ctx := stream.Context()
	tenants := tenantScope(ctx) // nil: an operator sees every tenant
	if t := req.GetTenantId(); t != "" {
		t = routing.Normalize(t)
		if tenants != nil && !slices.Contains(tenants, t) {
			tenants = []string{} // not the caller's: it sees nothing there, as if it had no jobs
		} else {
			tenants = []string{t}
		}
	}
	after := req.GetAfterEventId()
	if after == 0 {
		var err error
		if after, err = s.store.LastEventIDOverall(ctx); err != nil {
			return s.storeError(ctx, err, "")
		}
	}
	w := s.watch.addTenants(tenants, after)
	defer s.watch.removeTenants(w)
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case batch, ok := <-w.events:
			if !ok {
				return server.Error(codes.Aborted, luciusv1.ErrorReason_ERROR_REASON_WATCH_BEHIND,
					"the stream fell behind; watch again with after_event_id set to the last event_id received").Err()
			}
			for _, e := range batch {
				job, err := s.store.GetJob(ctx, e.JobID)
				if err != nil {
					return s.storeError(ctx, err, e.JobID)
				}
				if err := stream.Send(&luciusv1.WatchJobsResponse{Job: jobToProto(job), Event: eventToProto(e)}); err != nil {
					return err
				}
			}
		}
	}
}
