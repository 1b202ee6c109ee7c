package ledger

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"time"
)

// NewJobID mints a job id: 64 lowercase hex digits (the contract's form),
// the first 16 the acceptance time in nanoseconds since the Unix epoch and
// the rest 24 random bytes. Ids in time order keep a new job's rows at the
// right edge of every index keyed by job id (requests, jobs, steps,
// attempts, events), so writes stay on a few hot pages however much history
// the ledger holds; the random part keeps ids unguessable and unique across
// gateways. Request identity (idempotency) is Request.RequestKey, not the id.
func NewJobID(now time.Time) string {
	var b [32]byte
	binary.BigEndian.PutUint64(b[:8], uint64(now.UnixNano()))
	if _, err := rand.Read(b[8:]); err != nil {
		panic("ledger: no randomness for a job id: " + err.Error()) // crypto/rand does not fail on supported systems
	}
	return hex.EncodeToString(b[:])
}

// key is the request's identity: RequestKey, else its job id.
func (r Request) key() string {
	if r.RequestKey != "" {
		return r.RequestKey
	}
	return r.JobID
}
