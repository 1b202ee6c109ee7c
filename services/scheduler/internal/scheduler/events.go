package scheduler

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel"

	"github.com/lucius-platform/lucius/bus"
	"github.com/lucius-platform/lucius/bus/topology"
	"github.com/lucius-platform/lucius/core/ledger"
	"github.com/lucius-platform/lucius/core/runbook"
)

// Message ids are derived from the fact, so every scheduler names a fact
// alike and the outbox (unique message_id) and the bus (duplicate detection)
// both refuse a second copy. Member changes carry the time of the change: a
// member removed and added again is a new fact.

func batchInitID(batchID int64, version int) string {
	return fmt.Sprintf("%s/%d/v%d", runbook.EventBatchInit, batchID, version)
}

func phaseDueID(phaseExecutionID int64) string {
	return fmt.Sprintf("%s/%d", runbook.EventPhaseDue, phaseExecutionID)
}

func memberEventID(typ string, batchMemberID int64, at time.Time) string {
	return fmt.Sprintf("%s/%d/%d", typ, batchMemberID, at.UnixNano())
}

// pollCheckID: table is runbook.TableSteps or runbook.TableInit.
func pollCheckID(table string, id int64, pollCount int) string {
	return fmt.Sprintf("%s/%s/%d/%d", runbook.EventPollCheck, table, id, pollCount)
}

// outgoing is an event waiting for its transaction to commit.
type outgoing struct {
	typ string
	msg ledger.OutboxMessage
}

// emitter collects one transaction's events, enqueued at its end, and the
// log lines that describe them, written once it committed.
type emitter struct {
	out []outgoing
	// dropped are the ids of events found in the outbox already.
	dropped []string
	notes   []note
}

// note is a log line waiting for the commit; failure, when set, is the stage
// it counts a failure of.
type note struct {
	level   slog.Level
	msg     string
	attrs   []slog.Attr
	failure string
}

func (e *emitter) info(msg string, attrs ...slog.Attr) {
	e.notes = append(e.notes, note{level: slog.LevelInfo, msg: msg, attrs: attrs})
}

func (e *emitter) debug(msg string, attrs ...slog.Attr) {
	e.notes = append(e.notes, note{level: slog.LevelDebug, msg: msg, attrs: attrs})
}

// problem is a visible, counted failure that did not stop the transaction
// (a member whose params do not render).
func (e *emitter) problem(stage, msg string, attrs ...slog.Attr) {
	e.notes = append(e.notes, note{level: slog.LevelWarn, msg: msg, attrs: attrs, failure: stage})
}

func (e *emitter) add(typ, id string, body any) error {
	data, err := json.Marshal(body)
	if err != nil {
		return fmt.Errorf("encode %s: %w", id, err)
	}
	e.out = append(e.out, outgoing{typ: typ, msg: ledger.OutboxMessage{
		MessageID:   id,
		Destination: topology.TopicOrchestratorEvents,
		Kind:        ledger.KindRunbookEvent,
		Body:        data,
		ContentType: "application/json",
		Properties:  map[string]string{topology.PropertyMessageType: typ},
	}})
	return nil
}

// enqueue hands the events to the ledger transaction, leaving out any whose
// id is in the outbox already. The row changes that decide an event are
// conditional, so that never happens unless a fact was decided twice; a
// unique violation at commit would otherwise fail the transaction on every
// tick.
func (e *emitter) enqueue(ctx context.Context, tx *ledger.Tx) error {
	if len(e.out) == 0 {
		return nil
	}
	ids := make([]string, len(e.out))
	for i, o := range e.out {
		ids[i] = o.msg.MessageID
	}
	existing, err := tx.InOutbox(ctx, ids)
	if err != nil {
		return fmt.Errorf("check outbox: %w", err)
	}
	seen := make(map[string]bool, len(existing)+len(e.out))
	for _, id := range existing {
		seen[id] = true
	}
	kept := e.out[:0]
	for _, o := range e.out {
		if seen[o.msg.MessageID] {
			e.dropped = append(e.dropped, o.msg.MessageID)
			continue
		}
		seen[o.msg.MessageID] = true
		otel.GetTextMapPropagator().Inject(ctx, bus.PropertiesCarrier(o.msg.Properties))
		tx.Enqueue(o.msg)
		kept = append(kept, o)
	}
	e.out = kept
	return nil
}
