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

// remember records j's fields as the ledger now holds them.
func (t *Tx) remember(j *Job) {
	if t.written == nil {
		t.written = map[string]jobFields{}
	}
	t.written[j.JobID] = fieldsOf(j)
}

// SQL is the transaction for packages that keep their own tables in the ledger's database and must write them in the same transaction (runbook).
func (t *Tx) SQL() pgx.Tx { return t.tx }

// AfterCommit runs f once the transaction has committed, in the order
// registered. A transaction that rolls back drops it, and so does a try that
// InTx runs again (each try has a new Tx): what f records, such as a metric,
// describes a change that is in the ledger.
func (t *Tx) AfterCommit(f func()) { t.committed = append(t.committed, f) }

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
