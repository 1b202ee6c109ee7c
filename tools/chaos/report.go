package chaos

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"time"
)

// Report is what a chaos run did and found. Problems empty means it passed.
type Report struct {
	Config Config
	// Problems are the failed checks, one line each.
	Problems []string

	// Planned jobs, and how many the gateway accepted.
	Planned, Accepted int
	// SubmitRetried counts jobs whose submit took more than one call;
	// SubmitDuplicates those whose retry found the job already accepted;
	// SubmitErrors the failed calls by gRPC code.
	SubmitRetried, SubmitDuplicates int
	SubmitErrors                    map[string]int

	// Start is when the run began; Wall how long it took, suite start to
	// checks; Span first acceptance to last terminal job.
	Start time.Time
	Wall  time.Duration
	Span  time.Duration

	// Statuses counts jobs by final status, Expected by the status their
	// fault calls for, Faults by fault kind ("none" without one).
	Statuses, Expected, Faults map[string]int
	// Attempts counts task steps by their last attempt number.
	Attempts map[int]int

	// Stalls has one entry per disruption, in time order.
	Stalls []Stall

	// Absorbed counts duplicates and repairs the system absorbed
	// (informative), by a description.
	Absorbed map[string]int
	// Events counts the recovery-related audit events by type (and reason).
	Events map[string]int
	// DeadLetters counts the chaos jobs' dead letters by kind/reason.
	DeadLetters map[string]int
}

// What Report.Absorbed counts.
const (
	absorbedRetried   = "succeeded steps that needed a new attempt because of the chaos"
	absorbedTwice     = "steps a worker ran to success more than once (one effect kept)"
	absorbedTakenOver = "worker takeovers of an execution whose worker died"
)

// recoveryEvents are the audit events that show the system repairing itself.
var recoveryEvents = map[string]bool{
	"CALLBACK_DUPLICATE": true, "CALLBACK_REJECTED": true, "ACK_TIMEOUT": true, "LEASE_EXPIRED": true,
	"DIRECTIVE_REENQUEUED": true, "WRITE_FENCED": true, "OWNER_CHANGED": true, "JOB_REQUEST_REQUEUED": true,
	"BUS_DEAD_LETTER": true, "OUTBOX_STALE": true,
}

// fill completes the report from the ledger's snapshot, the submission and
// the driver's record.
func (r *Report) fill(snap *snapshot, sh shape, sub submission, d *driver) {
	disruptions, driverProblems := d.record()
	r.Accepted = accepted(sub.ids)
	r.SubmitRetried, r.SubmitDuplicates = sub.retried, sub.duplicates
	r.SubmitErrors = map[string]int{}
	for code, n := range sub.errors {
		r.SubmitErrors[code.String()] += n
	}
	r.Stalls = stalls(disruptions, snap.jobs)
	r.tally(snap, sh)
	r.Problems = append(append(sub.problems, driverProblems...), check(snap, sh)...)
	if r.Accepted < r.Planned {
		r.Problems = append(r.Problems, fmt.Sprintf("only %d of %d jobs were accepted", r.Accepted, r.Planned))
	}
}

// tally fills the report's counts from the snapshot.
func (r *Report) tally(snap *snapshot, sh shape) {
	r.Statuses, r.Expected, r.Faults = map[string]int{}, map[string]int{}, map[string]int{}
	r.Attempts, r.Events = map[int]int{}, map[string]int{}
	r.Absorbed = map[string]int{absorbedRetried: 0, absorbedTwice: 0, absorbedTakenOver: 0}
	r.DeadLetters = snap.deadLetters
	var first, last time.Time
	for _, j := range snap.jobs {
		r.Statuses[j.Status]++
		r.Expected[sh.expected(j.Fault)]++
		switch {
		case j.Fault == nil:
			r.Faults["none"]++
		case j.Fault.Kind == FaultRetryable && sh.expected(j.Fault) == statusFailedFinal:
			r.Faults["retryable (every attempt)"]++
		default:
			r.Faults[j.Fault.Kind]++
		}
		if first.IsZero() || j.ReceivedAt.Before(first) {
			first = j.ReceivedAt
		}
		if j.CompletedAt.After(last) {
			last = j.CompletedAt
		}
		for _, s := range j.Steps {
			r.Attempts[s.AttemptNo]++
			faulted := j.Fault != nil && j.Fault.Step == s.ID && j.Fault.Kind == FaultRetryable
			if s.Status == statusSucceeded && s.AttemptNo > 1 && !faulted {
				r.Absorbed[absorbedRetried]++
			}
			if s.SucceededExecutions > 1 {
				r.Absorbed[absorbedTwice]++
			}
			r.Absorbed[absorbedTakenOver] += s.Takeovers
		}
		for _, e := range j.Events {
			switch {
			case e.Type == "CALLBACK_REJECTED":
				r.Events[e.Type+" "+e.Reason]++
			case recoveryEvents[e.Type]:
				r.Events[e.Type]++
			}
		}
	}
	if !first.IsZero() && last.After(first) {
		r.Span = last.Sub(first)
	}
}

// MaxRecovery is the longest stall after a kill (of any process kind, or a
// crash), and after the PostgreSQL restart.
func (r *Report) MaxRecovery() (afterKill, afterPostgres Stall) {
	for _, s := range r.Stalls {
		if s.Kind == KindPostgres {
			if s.Stall >= afterPostgres.Stall {
				afterPostgres = s
			}
		} else if s.Stall >= afterKill.Stall {
			afterKill = s
		}
	}
	return afterKill, afterPostgres
}

// Print writes the report for people (and for an issue's closing note).
func (r *Report) Print(w io.Writer) {
	c := r.Config
	pg := "no"
	if c.PGRestart {
		pg = "once, when half the jobs are accepted"
	}
	transport := "PostgreSQL bus"
	if c.Bus == "servicebus" {
		transport = "Service Bus (LUCIUS_BUS=servicebus)"
	}
	fmt.Fprintf(w, "chaos run: %d three-step jobs at %g/s on the %s, seed %d, a kill every ~%s (down %s–%s), faults in %.0f%% of jobs, PostgreSQL restart: %s\n",
		c.Jobs, c.Rate, transport, c.Seed, c.KillEvery, c.Down.Min, c.Down.Max, 100*c.FaultRate, pg)
	if len(r.Problems) == 0 {
		fmt.Fprintln(w, "RESULT: PASS (no problems)")
	} else {
		fmt.Fprintf(w, "RESULT: FAIL (%d problems)\n", len(r.Problems))
	}

	fmt.Fprintln(w, "\ntiming")
	fmt.Fprintf(w, "  wall time                 %s (suite start to checks)\n", r.Wall.Round(100*time.Millisecond))
	if r.Span > 0 {
		fmt.Fprintf(w, "  first accept → last end   %s (%.1f jobs/s)\n", r.Span.Round(100*time.Millisecond), float64(r.Accepted)/r.Span.Seconds())
	}

	fmt.Fprintln(w, "\njobs")
	fmt.Fprintf(w, "  accepted                  %d of %d (%d needed a retried submit, %d of those were already in; failed calls: %s)\n",
		r.Accepted, r.Planned, r.SubmitRetried, r.SubmitDuplicates, counts(r.SubmitErrors))
	fmt.Fprintf(w, "  final status              %s\n", counts(r.Statuses))
	fmt.Fprintf(w, "  expected from the faults  %s\n", counts(r.Expected))
	fmt.Fprintf(w, "  faults                    %s\n", counts(r.Faults))
	fmt.Fprintf(w, "  task steps by attempts    %s (0: never dispatched, after its job failed)\n", histogram(r.Attempts))

	r.printChaos(w)

	fmt.Fprintln(w, "\nabsorbed (informative)")
	for _, k := range sortedKeys(r.Absorbed) {
		fmt.Fprintf(w, "  %-66s %d\n", k, r.Absorbed[k])
	}
	fmt.Fprintf(w, "  recovery events           %s\n", counts(r.Events))
	fmt.Fprintf(w, "  dead letters              %s\n", counts(r.DeadLetters))

	if len(r.Problems) > 0 {
		fmt.Fprintln(w, "\nproblems")
		const shown = 60
		for i, p := range r.Problems {
			if i == shown {
				fmt.Fprintf(w, "  … and %d more\n", len(r.Problems)-shown)
				break
			}
			fmt.Fprintf(w, "  - %s\n", p)
		}
	}
}

// printChaos prints the disruptions, one line each, and the recovery summary.
func (r *Report) printChaos(w io.Writer) {
	fmt.Fprintln(w, "\ndisruptions (stall: the longest a job live at the disruption waited for its next event, less retry backoff and")
	fmt.Fprintln(w, "injected sleeps; a job held up by overlapping disruptions counts for each)")
	fmt.Fprintf(w, "  %-9s %-22s %-9s %-11s %-9s %s\n", "at", "target", "down", "ready after", "stall", "live jobs")
	type agg struct {
		n     int
		worst Stall
	}
	byKind := map[string]*agg{}
	for _, s := range r.Stalls {
		ready := "never"
		if !s.Ready.IsZero() {
			ready = s.Ready.Sub(s.At).Round(10 * time.Millisecond).String()
		}
		fmt.Fprintf(w, "  %-9s %-22s %-9s %-11s %-9s %d\n", "T+"+s.At.Sub(r.Start).Round(100*time.Millisecond).String(),
			s.Target, s.Down.Round(10*time.Millisecond), ready, s.Stall.Round(10*time.Millisecond), s.Live)
		a := byKind[s.Kind]
		if a == nil {
			a = &agg{}
			byKind[s.Kind] = a
		}
		a.n++
		if s.Stall >= a.worst.Stall {
			a.worst = s
		}
	}
	kills := map[string]int{}
	for _, s := range r.Stalls {
		if s.Kind != KindPostgres && s.Kind != KindCrash {
			kills[s.Target]++
		}
	}
	fmt.Fprintf(w, "\n  kills per process         %s\n", counts(kills))
	fmt.Fprintln(w, "\nrecovery by kind")
	for _, kind := range []string{KindOrchestrator, KindReconciler, KindWorker, KindCrash, KindPostgres} {
		a := byKind[kind]
		if a == nil {
			continue
		}
		fmt.Fprintf(w, "  %-13s %3d × max stall %-8s (%s at T+%s, job %.12s…)\n", kind, a.n, a.worst.Stall.Round(10*time.Millisecond),
			a.worst.Target, a.worst.At.Sub(r.Start).Round(100*time.Millisecond), a.worst.Job)
	}
	kill, pg := r.MaxRecovery()
	fmt.Fprintf(w, "  max recovery after a kill: %s (%s)\n", kill.Stall.Round(10*time.Millisecond), kill.Target)
	if pg.Target != "" {
		fmt.Fprintf(w, "  recovery after the PostgreSQL restart: %s (restarted at T+%s, down %s)\n",
			pg.Stall.Round(10*time.Millisecond), pg.At.Sub(r.Start).Round(100*time.Millisecond), pg.Down.Round(10*time.Millisecond))
	}
}

// counts formats a count map as "A 3, B 2" (largest first), or "none".
func counts(m map[string]int) string {
	keys := sortedKeys(m)
	sort.SliceStable(keys, func(a, b int) bool { return m[keys[a]] > m[keys[b]] })
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// histogram formats attempt counts as "1: 1480, 2: 12".
func histogram(m map[int]int) string {
	keys := make([]int, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Ints(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%d: %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

func sortedKeys(m map[string]int) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
