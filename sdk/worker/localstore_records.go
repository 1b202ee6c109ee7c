package worker

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"time"

	"go.etcd.io/bbolt"
)

// The file's buckets. The two index buckets exist for Prune: their keys are
// a time followed by a record's key, so the oldest records come first and
// pruning a batch reads only what it deletes.
var (
	bucketMeta       = []byte("meta")
	bucketExecutions = []byte("executions")   // executionKey -> localExecution (JSON)
	bucketFinished   = []byte("finished")     // indexKey(finished at, executionKey) -> empty
	bucketEffects    = []byte("effects")      // effectKey -> effect (JSON)
	bucketCommitted  = []byte("committed")    // indexKey(committed at, effectKey) -> empty
	keyFormat        = []byte("format")       // in bucketMeta
	currentFormat    = []byte("localstore/1") // what this version writes and reads
)

// initLocalStore creates the buckets of a new file and refuses a file written
// in another format, so a later version's change of layout is not misread.
func initLocalStore(tx *bbolt.Tx) error {
	for _, name := range [][]byte{bucketMeta, bucketExecutions, bucketFinished, bucketEffects, bucketCommitted} {
		if _, err := tx.CreateBucketIfNotExists(name); err != nil {
			return fmt.Errorf("create bucket %s: %w", name, err)
		}
	}
	meta := tx.Bucket(bucketMeta)
	switch format := meta.Get(keyFormat); {
	case format == nil:
		return meta.Put(keyFormat, currentFormat)
	case string(format) != string(currentFormat):
		return fmt.Errorf("file format %q, this version reads %q", format, currentFormat)
	}
	return nil
}

// localExecution is one attempt's record: PGStore's worker_executions row.
type localExecution struct {
	Service  string `json:"service"`
	WorkerID string `json:"worker_id"`
	// The claim expires at ClaimedUntil unless extended; an expired claim of
	// an unfinished record may be taken over (Takeovers counts how often).
	ClaimedUntil time.Time `json:"claimed_until"`
	Takeovers    int       `json:"takeovers,omitzero"`
	StartedAt    time.Time `json:"started_at"`
	FinishedAt   time.Time `json:"finished_at,omitzero"`
	// Result is proto.Marshal of the lucius.v1.ResultRequest once finished
	// (empty for an empty RESULT, which is why finished looks at FinishedAt).
	Result []byte `json:"result,omitempty"`
}

func (e *localExecution) finished() bool { return !e.FinishedAt.IsZero() }

// effect is one step's committed effect: PGStore's worker_effects row.
type localEffect struct {
	AttemptNo   int       `json:"attempt_no"`
	LeaseID     string    `json:"lease_id"`
	Service     string    `json:"service"`
	WorkerID    string    `json:"worker_id"`
	CommittedAt time.Time `json:"committed_at"`
}

// getExecution returns the record at k, or nil when there is none.
func getExecution(tx *bbolt.Tx, k []byte) (*localExecution, error) {
	raw := tx.Bucket(bucketExecutions).Get(k)
	if raw == nil {
		return nil, nil
	}
	rec := &localExecution{}
	if err := json.Unmarshal(raw, rec); err != nil {
		return nil, fmt.Errorf("decode record: %w", err)
	}
	return rec, nil
}

func putExecution(tx *bbolt.Tx, k []byte, rec *localExecution) error {
	raw, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("encode record: %w", err)
	}
	return tx.Bucket(bucketExecutions).Put(k, raw)
}

// effectKey is the key of a step's effect: (job_id, step_id).
func effectKey(jobID, stepID string) []byte {
	return appendString(appendString(nil, jobID), stepID)
}

// executionKey is the key of an attempt's record: (job_id, step_id,
// attempt_no, lease_id). Every component is self-delimiting (strings carry
// their length, the number is a varint), so distinct keys never encode
// alike, as plain concatenation would ("ab"+"c" and "a"+"bc").
func executionKey(k Key) []byte {
	b := effectKey(k.JobID, k.StepID)
	b = binary.AppendVarint(b, int64(k.AttemptNo))
	return appendString(b, k.LeaseID)
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// timeLen is the length of the time in front of an index key.
const timeLen = 8

// indexKey is t as big-endian nanoseconds since 1970 (times from this
// store's clock, never earlier), then key: byte order is time order.
func indexKey(t time.Time, key []byte) []byte {
	b := binary.BigEndian.AppendUint64(make([]byte, 0, timeLen+len(key)), uint64(t.UnixNano()))
	return append(b, key...)
}

func indexTime(k []byte) time.Time {
	return time.Unix(0, int64(binary.BigEndian.Uint64(k[:timeLen])))
}

// pruneOldest deletes up to limit records of bucket records whose time in
// bucket index is before before, oldest first, with their index entries,
// and returns how many it deleted.
func pruneOldest(tx *bbolt.Tx, index, records []byte, before time.Time, limit int) (int, error) {
	idx, recs := tx.Bucket(index), tx.Bucket(records)
	c := idx.Cursor()
	n := 0
	// Always the first entry again: the previous one is deleted, and a
	// bbolt cursor may skip an entry when moved on after a deletion.
	for k, _ := c.First(); k != nil && n < limit && indexTime(k).Before(before); k, _ = c.First() {
		if err := recs.Delete(k[timeLen:]); err != nil {
			return n, err
		}
		if err := c.Delete(); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}
