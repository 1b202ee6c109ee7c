package ledger

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/lucius-platform/lucius/bus"
)

// Tx is a ledger transaction. Reads lock what they return (FOR UPDATE) in the
// order request → job → steps, which every writer follows to avoid deadlocks.
// Events and outbox messages are buffered and written in bulk at commit.
type Tx struct {
	tx *pipeTx
	// claim is the admission a new request asks for at commit; released are
	// the tenants whose slots terminal jobs give back.
	claim    *jobSlots
	released []string
	events   []Event
	outbox   []OutboxMessage
	// committed run after the commit (AfterCommit).
	committed []func()
	// written is each job's mutable fields as the ledger holds them (as
	// locked, inserted or last written in this transaction): UpdateJob
	// writes nothing when they did not change.
	written map[string]jobFields
}

// jobFields are the fields UpdateJob writes.
type jobFields struct {
	status                         JobStatus
	currentStep, reason, resultRef string
	cancelRequestedAt, completedAt time.Time
}

func fieldsOf(j *Job) jobFields {
	return jobFields{status: j.Status, currentStep: j.CurrentStepID, reason: j.Reason, resultRef: j.ResultRef,
		cancelRequestedAt: j.CancelRequestedAt, completedAt: j.CompletedAt}
}

// remember records j's fields as the ledger now holds them.
func (t *Tx) remember(j *Job) {
	if t.written == nil {
		t.written = map[string]jobFields{}
	}
	t.written[j.JobID] = fieldsOf(j)
}

// SQL is the transaction for packages that keep their own tables in the ledger's database and must write them in the same transaction (runbook).
func (t *Tx) SQL() pgx.Tx { return t.tx }

// Append records audit events, written when the transaction commits.
func (t *Tx) Append(events ...Event) { t.events = append(t.events, events...) }

// Annotate sets key in the data of every event of job appended so far that
// lacks it, e.g. the correlation id a callback echoed on the transitions it
// caused. An empty value changes nothing.
func (t *Tx) Annotate(jobID, key, value string) {
	if value == "" {
		return
	}
	for i := range t.events {
		e := &t.events[i]
		if e.JobID != jobID {
			continue
		}
		if _, ok := e.Data[key]; ok {
			continue
		}
		data := make(map[string]any, len(e.Data)+1)
		for k, v := range e.Data {
			data[k] = v
		}
		data[key] = value
		e.Data = data
	}
}

// AfterCommit runs f once the transaction has committed, in the order
// registered. A transaction that rolls back drops it, and so does a try that
// InTx runs again (each try has a new Tx): what f records, such as a metric,
// describes a change that is in the ledger.
func (t *Tx) AfterCommit(f func()) { t.committed = append(t.committed, f) }

// Enqueue records messages to publish, written when the transaction commits.
func (t *Tx) Enqueue(msgs ...OutboxMessage) { t.outbox = append(t.outbox, msgs...) }

// InOutbox returns the message ids among ids that the outbox holds already
// (sent or not): a producer that decides a message twice leaves it out
// instead of failing its commit on the unique message id.
func (t *Tx) InOutbox(ctx context.Context, ids []string) ([]string, error) {
	rows, err := t.tx.Query(ctx, sqlOutboxIDs, ids)
	if err != nil {
		return nil, fmt.Errorf("outbox ids: %w", err)
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// waiting names who sends the enqueued messages, for the notification.
func (t *Tx) waiting() []string {
	var publish, callbacks bool
	for _, m := range t.outbox {
		if m.Kind == KindCompletion {
			callbacks = true
		} else {
			publish = true
		}
	}
	var out []string
	if publish {
		out = append(out, NotifyPublish)
	}
	if callbacks {
		out = append(out, NotifyCallbacks)
	}
	return out
}

// LockRequest returns the request and locks it.
func (t *Tx) LockRequest(ctx context.Context, jobID string) (*Request, time.Time, error) {
	var r Request
	var cancelAt *time.Time
	err := t.tx.QueryRow(ctx, sqlLockRequest, jobID).Scan(&r.JobID, &r.TenantID, &r.IdempotencyKey, &r.RequestHash,
		&r.RequestType, &r.WorkflowVersion, &r.InputRef, &r.OutputRef, &r.DocID, &r.CorrelationID, &r.CallbackURL, &r.Command,
		&r.Routing.Mode, &r.Routing.Partition, &r.Routing.RoutingKey, &r.Routing.Topic, &r.Routing.DecisionSource,
		&r.Routing.DecisionReason, &cancelAt, &r.ReceivedAt, &r.ReplayOf, &r.Notify)
	if isNoRows(err) {
		return nil, time.Time{}, fmt.Errorf("request %s: %w", jobID, ErrNotFound)
	}
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("lock request %s: %w", jobID, err)
	}
	return &r, derefTime(cancelAt), nil
}

// MarkRequestCancelled records a cancellation asked for before any orchestrator
// created the job; the orchestrator that claims it creates it cancelled.
func (t *Tx) MarkRequestCancelled(ctx context.Context, jobID, reason string) error {
	if _, err := t.tx.Exec(ctx, sqlCancelRequest, jobID, reason); err != nil {
		return fmt.Errorf("cancel request %s: %w", jobID, err)
	}
	return nil
}

// LockJob returns the job and locks it. ErrNotFound when no orchestrator created it yet.
func (t *Tx) LockJob(ctx context.Context, jobID string) (*Job, error) {
	j, err := scanJob(t.tx.QueryRow(ctx, sqlLockJob, jobID))
	if isNoRows(err) {
		return nil, fmt.Errorf("job %s: %w", jobID, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("lock job %s: %w", jobID, err)
	}
	t.remember(j)
	return j, nil
}

// InsertJob creates the job unless it exists; it reports whether it did.
func (t *Tx) InsertJob(ctx context.Context, j *Job) (bool, error) {
	tag, err := t.tx.Exec(ctx, sqlInsertJob, j.JobID, j.TenantID, j.RequestType, j.WorkflowID, j.WorkflowVersion,
		j.Status, j.Routing.Mode, j.Routing.Partition, j.Routing.RoutingKey, j.Routing.Topic, j.Routing.DecisionSource,
		j.Routing.DecisionReason, j.InputRef, j.OutputRef, j.DocID, j.CorrelationID, j.CallbackURL, jsonOrEmpty(j.Payload),
		j.OwnerID, j.OwnerEpoch, j.CurrentStepID, j.Reason, nullTime(j.CancelRequestedAt), nullTime(j.CompletedAt),
		j.ReplayOf, nullTime(j.DeadlineAt), j.Notify, j.Priority)
	if err != nil {
		return false, fmt.Errorf("insert job %s: %w", j.JobID, err)
	}
	if tag.RowsAffected() == 1 {
		t.remember(j)
	}
	return tag.RowsAffected() == 1, nil
}

// UpdateJob writes the job's mutable fields (status, current step, reason,
// result, cancellation, completion).
func (t *Tx) UpdateJob(ctx context.Context, j *Job) error {
	if was, ok := t.written[j.JobID]; ok && was == fieldsOf(j) {
		return nil // nothing changed: no write (and no WAL for the row)
	}
	t.tx.holdOne("update job "+j.JobID, sqlUpdateJob, j.JobID, j.Status, j.CurrentStepID, j.Reason, j.ResultRef,
		nullTime(j.CancelRequestedAt), nullTime(j.CompletedAt))
	t.remember(j)
	return nil
}

// NodeSteps returns the job's workflow-node steps (not fan-out children) in
// definition order. Call LockJob first: the job lock guards its steps.
func (t *Tx) NodeSteps(ctx context.Context, jobID string) ([]Step, error) {
	return t.steps(ctx, sqlNodeSteps, jobID)
}

// Step returns one step (a node or a fan-out child).
func (t *Tx) Step(ctx context.Context, jobID, stepID string) (*Step, error) {
	return t.step(ctx, sqlStep, jobID, stepID)
}

// LockStep returns one step and locks its row (after LockJob). The job lock
// orders the engine's writers; the step lock also waits for the dispatcher,
// which moves published steps to AWAITING_ACK without the job lock, so a
// callback reads the status it replaces.
func (t *Tx) LockStep(ctx context.Context, jobID, stepID string) (*Step, error) {
	return t.step(ctx, sqlStep+` FOR UPDATE`, jobID, stepID)
}

func (t *Tx) step(ctx context.Context, query, jobID, stepID string) (*Step, error) {
	st, err := scanStep(t.tx.QueryRow(ctx, query, jobID, stepID))
	if isNoRows(err) {
		return nil, fmt.Errorf("step %s/%s: %w", jobID, stepID, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("step %s/%s: %w", jobID, stepID, err)
	}
	return &st, nil
}

// PendingChildren returns up to limit children of a fan-out step that have
// not started, in index order.
func (t *Tx) PendingChildren(ctx context.Context, jobID, parent string, limit int) ([]Step, error) {
	return t.steps(ctx, sqlPendingChildren, jobID, parent, limit)
}

// ChildResult is what one fan-out child produced.
type ChildResult struct {
	Output    json.RawMessage
	Artifacts []Artifact
}

// ChildResults returns every child's output and artifacts, in index order.
func (t *Tx) ChildResults(ctx context.Context, jobID, parent string) ([]ChildResult, error) {
	rows, err := t.tx.Query(ctx, sqlChildResults, jobID, parent)
	if err != nil {
		return nil, fmt.Errorf("children of %s/%s: %w", jobID, parent, err)
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (ChildResult, error) {
		var r ChildResult
		var artifacts []byte
		if err := row.Scan(&r.Output, &artifacts); err != nil {
			return r, err
		}
		return r, json.Unmarshal(artifacts, &r.Artifacts)
	})
}

// CancelledStep is a step CancelPending closed.
type CancelledStep struct {
	StepID string
	// Parent is the fan-out step a child belongs to ("" for a workflow node).
	Parent string
}

// CancelPending closes every step of the job that never started (nodes and
// fan-out children) and returns them.
func (t *Tx) CancelPending(ctx context.Context, jobID, reason string) ([]CancelledStep, error) {
	rows, err := t.tx.Query(ctx, sqlCancelPending, jobID, reason)
	if err != nil {
		return nil, fmt.Errorf("cancel pending steps of %s: %w", jobID, err)
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (CancelledStep, error) {
		var c CancelledStep
		return c, row.Scan(&c.StepID, &c.Parent)
	})
}

func (t *Tx) steps(ctx context.Context, query string, args ...any) ([]Step, error) {
	rows, err := t.tx.Query(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("steps: %w", err)
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (Step, error) { return scanStep(row) })
}

// InsertSteps creates steps.
func (t *Tx) InsertSteps(ctx context.Context, steps []Step) error {
	rows := make([][]any, len(steps))
	for i, s := range steps {
		artifacts, err := json.Marshal(nonNilArtifacts(s.Artifacts))
		if err != nil {
			return err
		}
		c := s.Children
		rows[i] = []any{s.JobID, s.StepID, s.NodeID, s.Kind, s.Parent, s.ChildNo, s.Index, s.Type, s.Service,
			string(s.Status), s.AttemptNo, nullUUID(s.LeaseID), s.MaxAttempts, s.AckTimeout.Milliseconds(),
			jsonOrNull(s.Params), jsonOrNull(s.Output), artifacts, s.Expanded, c.Total, c.Pending, c.Running,
			c.Succeeded, c.Failed, nullTime(s.CompletedAt), s.RetryBase}
	}
	_, err := t.tx.CopyFrom(ctx, pgx.Identifier{"steps"}, []string{"job_id", "step_id", "node_id", "kind",
		"parent_step_id", "child_index", "step_index", "step_type", "service", "status", "attempt_no", "lease_id",
		"max_attempts", "ack_timeout_ms", "params", "output", "artifacts", "expanded", "children_total",
		"children_pending", "children_running", "children_succeeded", "children_failed", "completed_at", "retry_base"},
		pgx.CopyFromRows(rows))
	if err != nil {
		return fmt.Errorf("insert steps: %w", err)
	}
	return nil
}

// UpdateStep writes a step's mutable fields.
func (t *Tx) UpdateStep(ctx context.Context, s *Step) error {
	artifacts, err := json.Marshal(nonNilArtifacts(s.Artifacts))
	if err != nil {
		return err
	}
	c := s.Children
	t.tx.holdOne(fmt.Sprintf("update step %s/%s", s.JobID, s.StepID), sqlUpdateStep, s.JobID, s.StepID, s.Status,
		s.AttemptNo, nullUUID(s.LeaseID), jsonOrNull(s.Params), jsonOrNull(s.Output), artifacts, s.FailureClass, s.Reason,
		s.Expanded, c.Total, c.Pending, c.Running, c.Succeeded, c.Failed, nullTime(s.StartedAt), nullTime(s.CompletedAt), s.RetryBase)
	return nil
}

// LockCallback reads what a worker's callback names, in one round trip: the
// job and the step, locked in that order as LockJob and LockStep lock them
// (ErrNotFound when either is missing; the job is returned when only the
// step is), and the attempt, nil when the step has no such attempt.
func (t *Tx) LockCallback(ctx context.Context, jobID, stepID string, attemptNo int) (*Job, *Step, *Attempt, error) {
	b := &pgx.Batch{}
	b.Queue(sqlLockJob, jobID)
	b.Queue(sqlStep+` FOR UPDATE`, jobID, stepID)
	b.Queue(sqlAttempt, jobID, stepID, attemptNo)
	br := t.tx.SendBatch(ctx, b)
	defer br.Close()
	job, err := scanJob(br.QueryRow())
	if isNoRows(err) {
		return nil, nil, nil, fmt.Errorf("job %s: %w", jobID, ErrNotFound)
	}
	if err != nil {
		return nil, nil, nil, fmt.Errorf("lock job %s: %w", jobID, err)
	}
	st, err := scanStep(br.QueryRow())
	if isNoRows(err) {
		return job, nil, nil, fmt.Errorf("step %s/%s: %w", jobID, stepID, ErrNotFound)
	}
	if err != nil {
		return job, nil, nil, fmt.Errorf("step %s/%s: %w", jobID, stepID, err)
	}
	a, err := scanAttempt(br.QueryRow())
	if isNoRows(err) {
		a, err = nil, nil
	}
	if err != nil {
		return job, nil, nil, fmt.Errorf("attempt %s/%s#%d: %w", jobID, stepID, attemptNo, err)
	}
	if err := br.Close(); err != nil {
		return job, nil, nil, err
	}
	return job, &st, a, nil
}

// Attempt returns one attempt of a step.
func (t *Tx) Attempt(ctx context.Context, jobID, stepID string, attemptNo int) (*Attempt, error) {
	a, err := scanAttempt(t.tx.QueryRow(ctx, sqlAttempt, jobID, stepID, attemptNo))
	if isNoRows(err) {
		return nil, fmt.Errorf("attempt %s/%s#%d: %w", jobID, stepID, attemptNo, ErrNotFound)
	}
	return a, err
}

// InsertAttempt creates an attempt with its pinned routing.
func (t *Tx) InsertAttempt(ctx context.Context, a *Attempt) error {
	t.tx.hold(fmt.Sprintf("insert attempt %s/%s#%d", a.JobID, a.StepID, a.AttemptNo), sqlInsertAttempt,
		a.JobID, a.StepID, a.AttemptNo, a.LeaseID, a.Status, a.Routing.Mode, a.Routing.Partition, a.Routing.RoutingKey,
		a.Routing.Topic, a.Routing.DecisionSource, a.Routing.DecisionReason, nullTime(a.AckDeadline))
	return nil
}

// SchedulePoll sets when a step waiting in POLLING is dispatched again,
// recording now as the start of its polling when it starts; PollDispatched
// clears the time once that poll is dispatched; EndPoll forgets the polling
// of a step that left it; PollStarted returns when it started (zero: the
// step is not polling on a schedule).
func (t *Tx) SchedulePoll(ctx context.Context, jobID, stepID string, now, next time.Time) error {
	t.tx.hold(fmt.Sprintf("schedule poll %s/%s", jobID, stepID), sqlSchedulePoll, jobID, stepID, now, next)
	return nil
}

// PollDispatched: see SchedulePoll.
func (t *Tx) PollDispatched(ctx context.Context, jobID, stepID string) error {
	t.tx.hold(fmt.Sprintf("poll dispatched %s/%s", jobID, stepID), sqlPollDispatched, jobID, stepID)
	return nil
}

// EndPoll: see SchedulePoll.
func (t *Tx) EndPoll(ctx context.Context, jobID, stepID string) error {
	t.tx.hold(fmt.Sprintf("end poll %s/%s", jobID, stepID), sqlEndPoll, jobID, stepID)
	return nil
}

// PollStarted: see SchedulePoll.
func (t *Tx) PollStarted(ctx context.Context, jobID, stepID string) (time.Time, error) {
	var started time.Time
	err := t.tx.QueryRow(ctx, sqlPollStarted, jobID, stepID).Scan(&started)
	if isNoRows(err) {
		return time.Time{}, nil
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("poll of %s/%s: %w", jobID, stepID, err)
	}
	return started, nil
}

// DetachDirective keeps the whole directive of an attempt (inserted in this
// transaction) whose bus message carries it detached; DetachedDirective
// returns it.
func (t *Tx) DetachDirective(ctx context.Context, jobID, stepID string, attemptNo int, directive []byte) error {
	t.tx.holdOne(fmt.Sprintf("detach directive %s/%s#%d", jobID, stepID, attemptNo), sqlDetachDirective,
		jobID, stepID, attemptNo, directive)
	return nil
}

// UpdateAttempt writes an attempt's mutable fields. Routing never changes.
func (t *Tx) UpdateAttempt(ctx context.Context, a *Attempt) error {
	t.tx.holdOne(fmt.Sprintf("update attempt %s/%s#%d", a.JobID, a.StepID, a.AttemptNo), sqlUpdateAttempt,
		a.JobID, a.StepID, a.AttemptNo, a.Status, a.WorkerID, a.FailureClass, a.Reason, nullTime(a.AckedAt),
		nullTime(a.LeaseExpiresAt), nullTime(a.CompletedAt), nullTime(a.LastHeartbeatAt), jsonOrNull(a.Progress))
	return nil
}

// commit writes the buffered events and outbox messages, then the admission
// changes, and commits, in one pipelined round trip with whatever writes are
// held: on a busy machine every round trip is a wait for the database
// backend and then for this process to be scheduled again, and those waits,
// not the statements, make the tail of a submit's latency. Every statement's
// failure is raised by the statement, so the COMMIT queued behind them runs
// only when all succeeded.
func (t *Tx) commit(ctx context.Context) error {
	b := &pgx.Batch{}
	if err := queueEvents(b, t.events); err != nil {
		return err
	}
	if err := queueOutbox(b, t.outbox); err != nil {
		return err
	}
	// Admission last: the tenant counter row and a limited scope's lock stay
	// held only until the commit.
	for _, tenant := range t.released {
		queueExec(b, "release tenant slot", sqlReleaseSlot, tenant)
	}
	if t.claim != nil {
		queueTakeSlots(b, *t.claim)
	}
	return t.tx.commitWith(ctx, b)
}

// queueChecked queues a statement whose outcome check judges, its error
// included.
func queueChecked(b *pgx.Batch, check func(pgconn.CommandTag, error) error, sql string, args ...any) {
	b.Queue(sql, args...).Fn = func(br pgx.BatchResults) error { return check(br.Exec()) }
}

// queueExec queues a statement whose failure is reported as what.
func queueExec(b *pgx.Batch, what, sql string, args ...any) {
	b.Queue(sql, args...).Fn = func(br pgx.BatchResults) error {
		if _, err := br.Exec(); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		return nil
	}
}

func queueEvents(b *pgx.Batch, events []Event) error {
	if len(events) == 0 {
		return nil
	}
	var c struct {
		jobs, steps, types, from, to, reasons []string
		attempts                              []int32
		data                                  []*string
	}
	for _, e := range events {
		var data *string
		if e.Data != nil {
			raw, err := json.Marshal(e.Data)
			if err != nil {
				return fmt.Errorf("event data: %w", err)
			}
			s := string(raw)
			data = &s
		}
		c.jobs, c.steps, c.attempts = append(c.jobs, e.JobID), append(c.steps, e.StepID), append(c.attempts, int32(e.AttemptNo))
		c.types, c.from, c.to = append(c.types, e.Type), append(c.from, e.FromStatus), append(c.to, e.ToStatus)
		c.reasons, c.data = append(c.reasons, e.Reason), append(c.data, data)
	}
	queueExec(b, "append events", sqlInsertEvents, c.jobs, c.steps, c.attempts, c.types, c.from, c.to, c.reasons, c.data)
	return nil
}

func queueOutbox(b *pgx.Batch, msgs []OutboxMessage) error {
	if len(msgs) == 0 {
		return nil
	}
	var c struct {
		ids, destinations, kinds, jobs, steps, contentTypes, props, keys, correlations, subjects []string
		attempts                                                                                 []int32
		bodies                                                                                   [][]byte
		scheduled                                                                                []*time.Time
		priorities                                                                               []int16
	}
	for _, m := range msgs {
		props, err := json.Marshal(nonNilMap(m.Properties))
		if err != nil {
			return err
		}
		contentType := m.ContentType
		if contentType == "" {
			contentType = "application/json"
		}
		c.ids, c.destinations, c.kinds = append(c.ids, m.MessageID), append(c.destinations, m.Destination), append(c.kinds, m.Kind)
		c.jobs, c.steps, c.attempts = append(c.jobs, m.JobID), append(c.steps, m.StepID), append(c.attempts, int32(m.AttemptNo))
		c.bodies, c.contentTypes, c.props = append(c.bodies, m.Body), append(c.contentTypes, contentType), append(c.props, string(props))
		c.keys, c.correlations, c.subjects = append(c.keys, m.Key), append(c.correlations, m.CorrelationID), append(c.subjects, m.Subject)
		c.scheduled, c.priorities = append(c.scheduled, nullTime(m.ScheduledAt)), append(c.priorities, int16(bus.ClampPriority(m.Priority)))
	}
	queueExec(b, "enqueue outbox", sqlInsertOutbox, c.ids, c.destinations, c.kinds, c.jobs, c.steps, c.attempts, c.bodies, c.contentTypes,
		c.props, c.keys, c.correlations, c.subjects, c.scheduled, c.priorities, bus.PriorityHeadStart.Microseconds())
	return nil
}

func nonNilArtifacts(a []Artifact) []Artifact {
	if a == nil {
		return []Artifact{}
	}
	return a
}

func nonNilMap(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

func nullUUID(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func jsonOrNull(raw json.RawMessage) any {
	if len(raw) == 0 {
		return nil
	}
	return string(raw)
}

func jsonOrEmpty(raw json.RawMessage) string {
	if len(raw) == 0 {
		return "{}"
	}
	return string(raw)
}
