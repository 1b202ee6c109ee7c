package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/lucius-platform/lucius/base/loop"
	"github.com/lucius-platform/lucius/tools/stack"
)

// Process kinds the driver kills, and the other disruptions it records.
const (
	KindOrchestrator = "orchestrator"
	KindReconciler   = "reconciler"
	KindWorker       = "worker"
	// KindPostgres is the PostgreSQL restart.
	KindPostgres = "postgres"
	// KindCrash is a process that exited without being killed.
	KindCrash = "crash"
)

// killKinds are the kinds of process the driver kills, in turn.
var killKinds = []string{KindOrchestrator, KindReconciler, KindWorker}

// kindOf names the kind of a stack process ("" for one never killed).
func kindOf(name string) string {
	switch {
	case strings.HasPrefix(name, "orchestrator-"):
		return KindOrchestrator
	case name == "reconciler":
		return KindReconciler
	case strings.HasPrefix(name, "worker-"):
		return KindWorker
	}
	return ""
}

// Disruption is one kill, crash or PostgreSQL restart.
type Disruption struct {
	// Target is the process name, or "postgres".
	Target string
	Kind   string
	// At is when the kill was sent (or the restart began).
	At time.Time
	// Down is how long a killed process was kept down before its restart.
	Down time.Duration
	// Ready is when the target was ready again; zero if it never was.
	Ready time.Time
	// Starts counts the starts it took to be ready again (more than one when
	// PostgreSQL was down meanwhile).
	Starts int
}

// driver kills and restarts processes of a running stack and restarts
// PostgreSQL, recording each disruption.
type driver struct {
	s        *stack.Stack
	cfg      Config
	rng      *rand.Rand // used by the run goroutine only
	progress func(format string, args ...any)

	// wg tracks restart goroutines; Add is only called by the run and
	// supervise goroutines, so Wait after both returned is safe.
	wg sync.WaitGroup

	mu          sync.Mutex
	up          map[string]bool // processes that are running and meant to be
	disruptions []Disruption
	problems    []string
	kills       map[string]int // by kind
	round       []string       // kinds left in the current round of kills
}

func newDriver(s *stack.Stack, cfg Config, rng *rand.Rand, progress func(format string, args ...any)) *driver {
	d := &driver{s: s, cfg: cfg, rng: rng, progress: progress, up: map[string]bool{}, kills: map[string]int{}}
	for _, name := range s.Names() {
		d.up[name] = true
	}
	return d
}

// run kills a random process every KillEvery on average (and restarts it
// after a Down delay), restarts PostgreSQL when halfway closes, and returns
// once submitted is closed, PostgreSQL was restarted (if asked) and every
// kind was killed MinKills times.
func (d *driver) run(ctx context.Context, submitted, halfway <-chan struct{}) {
	pgDone := !d.cfg.PGRestart
	allSubmitted := false
	for {
		if allSubmitted && !pgDone {
			// Submission ended before reaching halfway (deadline): restart now.
			d.restartPostgres(ctx)
			pgDone = true
		}
		if allSubmitted && pgDone && d.enoughKills() {
			return
		}
		timer := time.NewTimer(d.nextInterval())
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-submitted:
			submitted, allSubmitted = nil, true
		case <-halfway:
			halfway = nil
			if !pgDone {
				d.restartPostgres(ctx)
				pgDone = true
			}
		case <-timer.C:
			d.killNext(ctx)
		}
		timer.Stop()
	}
}

// nextInterval draws the time to the next kill: exponential with mean
// KillEvery (kills at random moments), at least 50ms apart.
func (d *driver) nextInterval() time.Duration {
	return max(50*time.Millisecond, time.Duration(d.rng.ExpFloat64()*float64(d.cfg.KillEvery)))
}

func (d *driver) enoughKills() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, k := range killKinds {
		if d.kills[k] < d.cfg.MinKills {
			return false
		}
	}
	return true
}

// nextKind takes kinds in rounds, each round a shuffle of all of them, so
// every kind is killed about as often whatever the number of instances.
func (d *driver) nextKind() string {
	if len(d.round) == 0 {
		d.round = append([]string(nil), killKinds...)
		d.rng.Shuffle(len(d.round), func(i, j int) { d.round[i], d.round[j] = d.round[j], d.round[i] })
	}
	k := d.round[0]
	d.round = d.round[1:]
	return k
}

// killNext SIGKILLs a running process of the next kind (or of the kind after
// it, when all of that kind are down) and schedules its restart.
func (d *driver) killNext(ctx context.Context) {
	for range killKinds {
		kind := d.nextKind()
		name, ok := d.takeDown(kind)
		if !ok {
			continue
		}
		down := d.cfg.Down.Min + time.Duration(d.rng.Int64N(int64(d.cfg.Down.Max-d.cfg.Down.Min)+1))
		at := time.Now()
		if err := d.s.Kill(name); err != nil {
			d.problem("kill %s: %v", name, err)
		}
		d.mu.Lock()
		d.kills[kind]++
		d.disruptions = append(d.disruptions, Disruption{Target: name, Kind: kind, At: at, Down: down})
		i := len(d.disruptions) - 1
		d.mu.Unlock()
		d.progress("kill %s (down %s)", name, down.Round(time.Millisecond))
		d.wg.Add(1)
		go d.bringBack(ctx, i, name, down)
		return
	}
}

// takeDown picks a running process of kind at random and marks it down, so
// the supervisor does not take its death for a crash.
func (d *driver) takeDown(kind string) (string, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	var candidates []string
	for name, up := range d.up {
		if up && kindOf(name) == kind {
			candidates = append(candidates, name)
		}
	}
	if len(candidates) == 0 {
		return "", false
	}
	sort.Strings(candidates) // map order is random; the seed should decide
	name := candidates[d.rng.IntN(len(candidates))]
	d.up[name] = false
	return name, true
}

// bringBack restarts a process after a delay and marks it up once ready. A
// start can fail while PostgreSQL is down (the process exits): it is tried
// again until ctx ends.
func (d *driver) bringBack(ctx context.Context, i int, name string, after time.Duration) {
	defer d.wg.Done()
	if !loop.Sleep(ctx, after) {
		return
	}
	for starts := 1; ; starts++ {
		err := d.s.Restart(ctx, name)
		if err == nil {
			d.mu.Lock()
			d.up[name] = true
			d.disruptions[i].Ready, d.disruptions[i].Starts = time.Now(), starts
			d.mu.Unlock()
			return
		}
		if ctx.Err() != nil {
			return
		}
		// A process that started but never became ready must not run twice.
		_ = d.s.Kill(name)
		d.progress("restart %s failed (start %d): %v", name, starts, err)
		if !loop.Sleep(ctx, 500*time.Millisecond) {
			return
		}
	}
}

// restartPostgres restarts the cluster (immediate shutdown, like a crash).
func (d *driver) restartPostgres(ctx context.Context) {
	d.progress("restart PostgreSQL")
	at := time.Now()
	err := d.s.Cluster().Restart(ctx)
	ready := time.Now()
	if err != nil {
		d.problem("restart PostgreSQL: %v", err)
		ready = time.Time{}
	}
	d.mu.Lock()
	d.disruptions = append(d.disruptions, Disruption{Target: "postgres", Kind: KindPostgres, At: at, Down: time.Since(at), Ready: ready, Starts: 1})
	d.mu.Unlock()
	d.progress("PostgreSQL back after %s", ready.Sub(at).Round(time.Millisecond))
}

// supervise restarts, and reports, any process that exits without having
// been killed: the suite is meant to ride out kills and PostgreSQL restarts.
func (d *driver) supervise(ctx context.Context) {
	for loop.Sleep(ctx, 200*time.Millisecond) {
		for _, name := range d.s.Names() {
			p := d.s.Process(name)
			d.mu.Lock()
			crashed := d.up[name] && !p.Running() && !p.Stopping()
			if crashed {
				d.up[name] = false
				d.disruptions = append(d.disruptions, Disruption{Target: name, Kind: KindCrash, At: time.Now()})
			}
			i := len(d.disruptions) - 1
			d.mu.Unlock()
			if crashed {
				d.problem("%s exited without being killed (see its log lines)", name)
				d.progress("%s exited on its own; restarting it", name)
				d.wg.Add(1)
				go d.bringBack(ctx, i, name, 0)
			}
		}
	}
}

// waitUp waits until every process is up again.
func (d *driver) waitUp(ctx context.Context) bool {
	for {
		d.mu.Lock()
		var down []string
		for name, up := range d.up {
			if !up {
				down = append(down, name)
			}
		}
		d.mu.Unlock()
		if len(down) == 0 {
			return true
		}
		if !loop.Sleep(ctx, 100*time.Millisecond) {
			sort.Strings(down)
			d.problem("still down at the deadline: %s", strings.Join(down, ", "))
			return false
		}
	}
}

func (d *driver) problem(format string, args ...any) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.problems = append(d.problems, fmt.Sprintf(format, args...))
}

// record returns copies of what the driver recorded, disruptions in time order.
func (d *driver) record() ([]Disruption, []string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	ds := append([]Disruption(nil), d.disruptions...)
	sort.SliceStable(ds, func(a, b int) bool { return ds[a].At.Before(ds[b].At) })
	return ds, append([]string(nil), d.problems...)
}
