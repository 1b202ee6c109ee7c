package ledger

import (
	"context"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// MetricDeadLetters counts the dead letters written to the ledger, by kind
// (DeadLetterStep, DeadLetterBus), once their transaction has committed.
// The process that writes one counts it: step dead letters in the
// orchestrator and the reconciler (whoever runs the engine's transition),
// bus dead letters in the reconciler (its collector).
const MetricDeadLetters = "lucius_dead_letters_total"

// deadLetters is on the global meter provider: dead letters are written
// through Tx methods, in every process that opens a Store.
var deadLetters = func() metric.Int64Counter {
	c, err := otel.Meter("lucius/ledger").Int64Counter(MetricDeadLetters,
		metric.WithDescription("Dead letters written to the ledger, by kind (step, bus)."))
	if err != nil {
		otel.Handle(err)
	}
	return c
}()

// countDeadLetter counts a dead letter of kind once t commits.
func (t *Tx) countDeadLetter(ctx context.Context, kind string) {
	t.AfterCommit(func() { deadLetters.Add(ctx, 1, metric.WithAttributes(attribute.String("kind", kind))) })
}
