package worker

import (
	"context"
	"errors"
	"time"

	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
)

// Store records which attempts this service executed and the RESULT each one
// produced, keyed by Key. It is what makes a duplicate directive harmless:
// a finished attempt is never executed again, and its RESULT can be re-sent
// byte for byte. It also records each step's committed effect, keyed by the
// step alone (see Finish). PGStore is the PostgreSQL implementation;
// package storetest is the conformance suite every implementation passes.
//
// An attempt has one record from its first claim on. A claim is held until a
// time (the runner passes the bus message's lock expiry and extends both
// together), so a worker that dies mid-execution loses its claim when its
// message becomes deliverable again, and the redelivery takes the claim over.
type Store interface {
	// Claim starts (or takes over) the execution of an attempt:
	//   - no record: creates one held by c.WorkerID until c.Until (ClaimAcquired);
	//   - an unfinished record whose claim expired: takes it over (ClaimAcquired,
	//     TookOver true);
	//   - a finished record: ClaimDone with the stored RESULT;
	//   - an unfinished record with a live claim: ClaimBusy.
	Claim(ctx context.Context, c Claim) (ClaimResult, error)
	// Extend moves the claim's expiry to until. ErrClaimLost when workerID no
	// longer holds an unfinished claim.
	Extend(ctx context.Context, key Key, workerID string, until time.Time) error
	// Finish stores the attempt's RESULT and marks it finished. With an
	// effect (a successful attempt's), the same write records that the step
	// committed its effect, unless the step already has one: the record is
	// keyed by (job_id, step_id) only, and the first wins; effectInserted
	// says whether this call inserted it. ErrClaimLost when workerID no
	// longer holds an unfinished claim (nothing is written then).
	Finish(ctx context.Context, key Key, workerID string, result *luciusv1.ResultRequest, effect *Effect) (effectInserted bool, err error)
	// Release expires workerID's unfinished claim at once, so a redelivery can
	// take the attempt over without waiting (the worker is shutting down).
	Release(ctx context.Context, key Key, workerID string) error
	// Forget deletes workerID's unfinished record: the attempt turned out not
	// to be this worker's to run (the ACK was answered STALE_ATTEMPT,
	// LEASE_MISMATCH or AFTER_TERMINAL, or a heartbeat said the lease was
	// lost mid-execution), so nothing is recorded as done.
	Forget(ctx context.Context, key Key, workerID string) error
	// Prune deletes up to batch finished attempt records and step effects
	// older than before, returning how many it deleted; unfinished records
	// stay. The runtime calls it hourly with the retention
	// (LUCIUS_WORKER_RETENTION): a directive redelivered after its record
	// was pruned would run again, so keep records longer than any
	// redelivery can arrive (the bus TTL, 14 days by default).
	Prune(ctx context.Context, before time.Time, batch int) (int64, error)
}

// Effect is the committed effect of a step: which attempt's work counts.
// A step has at most one, whatever number of its attempts succeed.
type Effect struct {
	// Key is the attempt that committed the effect; only its JobID and
	// StepID identify the record.
	Key
	// Service and WorkerID are recorded for the audit trail.
	Service  string
	WorkerID string
}

// ErrClaimLost means the caller no longer holds the attempt's claim: it
// expired and another worker took it over, or the attempt finished.
var ErrClaimLost = errors.New("worker: execution claim lost")

// Claim asks to execute an attempt.
type Claim struct {
	Key
	// Service and WorkerID are recorded for the audit trail.
	Service  string
	WorkerID string
	// Until is when the claim expires unless extended.
	Until time.Time
}

// ClaimState is the answer to a claim.
type ClaimState int

// Claim answers.
const (
	// ClaimAcquired: the caller executes the attempt.
	ClaimAcquired ClaimState = iota + 1
	// ClaimDone: the attempt finished before; ClaimResult.Result is its RESULT.
	ClaimDone
	// ClaimBusy: another worker holds a live claim and is executing it.
	ClaimBusy
)

func (s ClaimState) String() string {
	switch s {
	case ClaimAcquired:
		return "acquired"
	case ClaimDone:
		return "done"
	case ClaimBusy:
		return "busy"
	}
	return "unknown"
}

// ClaimResult is the outcome of Store.Claim.
type ClaimResult struct {
	State ClaimState
	// TookOver is true when ClaimAcquired took over an expired claim: an
	// earlier execution of this attempt was interrupted.
	TookOver bool
	// Result is the stored RESULT when State is ClaimDone.
	Result *luciusv1.ResultRequest
}
