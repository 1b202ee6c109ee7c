package pgbus

import (
	"context"
	"fmt"
	"time"

	"github.com/lucius-platform/lucius/bus/bustel"
)

// system is the attribute messaging.system of the PostgreSQL bus's spans.
const system = "lucius_pgbus"

func newInstruments(b *Bus, cfg Config) (*bustel.Instruments, error) {
	in, err := bustel.New(bustel.Config{
		System:         system,
		MeterProvider:  cfg.MeterProvider,
		TracerProvider: cfg.TracerProvider,
		Propagator:     cfg.Propagator,
		Depth:          b.depth,
	})
	if err != nil {
		return nil, fmt.Errorf("pgbus: %w", err)
	}
	return in, nil
}

// depth reads every receivable path's depth and oldest message age from the
// tables, in one query. Every process on the database reports the same
// values; aggregate with max.
func (b *Bus) depth(ctx context.Context) ([]bustel.Depth, error) {
	if b.closed() {
		return nil, nil
	}
	rows, err := b.pool.Query(ctx, qDepth)
	if err != nil {
		return nil, fmt.Errorf("pgbus: queue depth: %w", err)
	}
	defer rows.Close()
	var out []bustel.Depth
	for rows.Next() {
		var (
			d      bustel.Depth
			oldest float64
		)
		if err := rows.Scan(&d.Entity, &d.Active, &d.Scheduled, &oldest); err != nil {
			return out, fmt.Errorf("pgbus: queue depth: %w", err)
		}
		d.OldestAge = time.Duration(oldest * float64(time.Second))
		out = append(out, d)
	}
	if err := rows.Err(); err != nil {
		return out, fmt.Errorf("pgbus: queue depth: %w", err)
	}
	return out, nil
}
