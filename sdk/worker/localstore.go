package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
	"google.golang.org/protobuf/proto"

	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
)

// LocalStore is a Store in a local file (bbolt; LUCIUS_WORKER_STORE=local), for workers
// that must not hold database credentials: a worker on Azure Service Bus
// with no PostgreSQL access, for one.
//
// Use one file per worker instance, on storage that outlives the process
// (a persistent volume), and open it from one process at a time: OpenLocalStore fails
// while another Store holds the file.
//
// The file is the instance's memory of what it executed, and that is the
// trade-off against PGStore, which every instance of a service
// shares. With PGStore, a directive redelivered to any instance finds the
// attempt's record: a finished attempt re-sends its stored RESULT, a running
// one is left alone. With this store only the instance that claimed the
// attempt knows it. A redelivery to that instance (a duplicate message, a
// restart after a crash) behaves as with PGStore; a redelivery to another
// instance (the first one's message lock expired while it was executing or
// before its message was completed) is claimed afresh there, and
// Finish's "one effect per step" holds within an instance only.
//
// What protects the job then is the orchestrator's fencing, not this store.
// The ACK stops an localExecution before it runs when the attempt or lease is
// superseded or the step ended otherwise (STALE_ATTEMPT, LEASE_MISMATCH,
// AFTER_TERMINAL). An ACK of the same attempt answered DUPLICATE does not
// stop it: the work runs a second time, and its RESULT changes nothing, as
// the orchestrator applies one RESULT per attempt. Executors must therefore
// tolerate running an attempt twice, even at the same time on two instances
// writing the same attempt directory of the workspace.
//
// A file lost with its volume loses that memory: redeliveries of attempts
// executed before run again, under the same fencing.
//
// It is safe for concurrent use:
// every method is one bbolt transaction, and bbolt runs one write
// transaction at a time.
type LocalStore struct {
	db *bbolt.DB
}

var _ Store = (*LocalStore)(nil)

// DefaultLocalStoreLockTimeout is how long Open waits for another Store to release
// the file before failing.
const DefaultLocalStoreLockTimeout = time.Second

// LocalStoreOption configures Open.
type LocalStoreOption func(*localStoreOptions)

type localStoreOptions struct {
	lockTimeout time.Duration
}

// LocalStoreLockTimeout sets how long Open waits for the file's lock (by default
// DefaultLocalStoreLockTimeout). A d of zero or less keeps the default: bbolt would
// wait forever, and a second instance on the same file must fail, not hang.
func LocalStoreLockTimeout(d time.Duration) LocalStoreOption {
	return func(o *localStoreOptions) {
		if d > 0 {
			o.lockTimeout = d
		}
	}
}

// OpenLocalStore opens the store in the file at path, creating the file (mode 0600)
// and its missing parent directories (mode 0700) if needed. It fails when
// another Store, in this process or another, has the file open.
func OpenLocalStore(path string, opts ...LocalStoreOption) (*LocalStore, error) {
	if path == "" {
		return nil, errors.New("localstore: open: empty path")
	}
	o := localStoreOptions{lockTimeout: DefaultLocalStoreLockTimeout}
	for _, opt := range opts {
		opt(&o)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("localstore: open %s: create its directory: %w", path, err)
	}
	bo := *bbolt.DefaultOptions
	bo.Timeout = o.lockTimeout
	db, err := bbolt.Open(path, 0o600, &bo)
	if errors.Is(err, bolterrors.ErrTimeout) {
		return nil, fmt.Errorf("localstore: open %s: still locked after %v: another Store, in this or another process, has it open (use one file per worker instance): %w",
			path, o.lockTimeout, err)
	}
	if err != nil {
		return nil, fmt.Errorf("localstore: open %s: %w", path, err)
	}
	if err := db.Update(initLocalStore); err != nil {
		return nil, errors.Join(fmt.Errorf("localstore: open %s: %w", path, err), db.Close())
	}
	return &LocalStore{db: db}, nil
}

// Close closes the file, waiting for running transactions.
func (s *LocalStore) Close() error {
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("localstore: close %s: %w", s.db.Path(), err)
	}
	return nil
}

// Claim implements Store in one write transaction, so two claims of
// one attempt cannot both acquire it.
func (s *LocalStore) Claim(ctx context.Context, c Claim) (ClaimResult, error) {
	var res ClaimResult
	err := s.update(ctx, func(tx *bbolt.Tx) error {
		k := executionKey(c.Key)
		rec, err := getExecution(tx, k)
		if err != nil {
			return err
		}
		now := time.Now()
		switch {
		case rec == nil:
			rec = &localExecution{Service: c.Service, WorkerID: c.WorkerID, ClaimedUntil: c.Until, StartedAt: now}
			res = ClaimResult{State: ClaimAcquired}
		case rec.finished():
			stored := &luciusv1.ResultRequest{}
			if err := proto.Unmarshal(rec.Result, stored); err != nil {
				return fmt.Errorf("stored result: %w", err)
			}
			res = ClaimResult{State: ClaimDone, Result: stored}
			return nil
		case rec.ClaimedUntil.Before(now):
			rec.Service, rec.WorkerID, rec.ClaimedUntil = c.Service, c.WorkerID, c.Until
			rec.Takeovers++
			res = ClaimResult{State: ClaimAcquired, TookOver: true}
		default:
			res = ClaimResult{State: ClaimBusy}
			return nil
		}
		return putExecution(tx, k, rec)
	})
	if err != nil {
		return ClaimResult{}, fmt.Errorf("localstore: claim %s: %w", c.Key, err)
	}
	return res, nil
}

// Extend implements Store.
func (s *LocalStore) Extend(ctx context.Context, key Key, workerID string, until time.Time) error {
	return s.held(ctx, "extend claim", key, workerID, func(tx *bbolt.Tx, k []byte, rec *localExecution) error {
		rec.ClaimedUntil = until
		return putExecution(tx, k, rec)
	})
}

// Finish implements Store. The RESULT is stored as protobuf bytes
// and indexed by its finish time for Prune.
func (s *LocalStore) Finish(ctx context.Context, key Key, workerID string, result *luciusv1.ResultRequest, effect *Effect) (bool, error) {
	if result == nil {
		return false, fmt.Errorf("localstore: finish %s: nil result", key)
	}
	raw, err := proto.Marshal(result)
	if err != nil {
		return false, fmt.Errorf("localstore: finish %s: encode result: %w", key, err)
	}
	var inserted bool
	err = s.held(ctx, "finish", key, workerID, func(tx *bbolt.Tx, k []byte, rec *localExecution) error {
		now := time.Now()
		rec.FinishedAt, rec.ClaimedUntil, rec.Result = now, now, raw
		if err := tx.Bucket(bucketFinished).Put(indexKey(now, k), []byte{}); err != nil {
			return err
		}
		if err := putExecution(tx, k, rec); err != nil {
			return err
		}
		if effect != nil {
			inserted, err = putEffect(tx, *effect, now)
		}
		return err
	})
	return inserted, err
}

// Release implements Store. Like PGStore, it sets the claim's expiry
// a microsecond in the past, so the next Claim finds it expired.
func (s *LocalStore) Release(ctx context.Context, key Key, workerID string) error {
	return s.held(ctx, "release claim", key, workerID, func(tx *bbolt.Tx, k []byte, rec *localExecution) error {
		rec.ClaimedUntil = time.Now().Add(-time.Microsecond)
		return putExecution(tx, k, rec)
	})
}

// Forget implements Store. An unfinished record has no index entry,
// so deleting the record is all.
func (s *LocalStore) Forget(ctx context.Context, key Key, workerID string) error {
	return s.held(ctx, "forget", key, workerID, func(tx *bbolt.Tx, k []byte, _ *localExecution) error {
		return tx.Bucket(bucketExecutions).Delete(k)
	})
}

// putEffect records e's step effect at now unless the step has one, and
// reports whether it did.
func putEffect(tx *bbolt.Tx, e Effect, now time.Time) (bool, error) {
	k := effectKey(e.JobID, e.StepID)
	effects := tx.Bucket(bucketEffects)
	if effects.Get(k) != nil {
		return false, nil
	}
	raw, err := json.Marshal(localEffect{AttemptNo: e.AttemptNo, LeaseID: e.LeaseID, Service: e.Service, WorkerID: e.WorkerID, CommittedAt: now})
	if err != nil {
		return false, fmt.Errorf("encode effect: %w", err)
	}
	if err := effects.Put(k, raw); err != nil {
		return false, err
	}
	return true, tx.Bucket(bucketCommitted).Put(indexKey(now, k), []byte{})
}

// Prune implements Store: up to batch finished records, then step
// effects with what is left of batch, older than before, oldest first. A
// batch of zero or less deletes nothing.
func (s *LocalStore) Prune(ctx context.Context, before time.Time, batch int) (int64, error) {
	var deleted int
	err := s.update(ctx, func(tx *bbolt.Tx) error {
		n, err := pruneOldest(tx, bucketFinished, bucketExecutions, before, batch)
		if err != nil {
			return fmt.Errorf("executions: %w", err)
		}
		m, err := pruneOldest(tx, bucketCommitted, bucketEffects, before, batch-n)
		if err != nil {
			return fmt.Errorf("effects: %w", err)
		}
		deleted = n + m
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("localstore: prune: %w", err)
	}
	return int64(deleted), nil
}

// update runs fn in one write transaction. bbolt takes no context, so a
// done ctx is honoured before the transaction starts, not during it.
func (s *LocalStore) update(ctx context.Context, fn func(tx *bbolt.Tx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return s.db.Update(fn)
}

// held runs change on workerID's unfinished record of key in one write
// transaction, or fails with ErrClaimLost when there is none (never
// claimed, taken over by another worker, forgotten or finished).
func (s *LocalStore) held(ctx context.Context, what string, key Key, workerID string,
	change func(tx *bbolt.Tx, k []byte, rec *localExecution) error) error {
	err := s.update(ctx, func(tx *bbolt.Tx) error {
		k := executionKey(key)
		rec, err := getExecution(tx, k)
		if err != nil {
			return err
		}
		if rec == nil || rec.WorkerID != workerID || rec.finished() {
			return ErrClaimLost
		}
		return change(tx, k, rec)
	})
	if err != nil {
		return fmt.Errorf("localstore: %s %s: %w", what, key, err)
	}
	return nil
}
