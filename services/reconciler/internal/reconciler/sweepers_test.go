package reconciler

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/lucius-platform/lucius/core/engine"
)

// A round drains full batches and stops at a short scan or a failing repair,
// so a candidate that keeps failing waits for the next interval.
func TestSweeperRoundDrainsFullBatchesAndStopsOnFailure(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		batches   [][]int // what successive scans return
		failOn    int     // candidate whose repair fails (0: none)
		scanErr   bool    // the second scan fails
		wantScans int
		wantFixed int
	}{
		{"a short batch ends the round", [][]int{{1, 2}}, 0, false, 1, 2},
		{"full batches scan again at once", [][]int{{1, 2, 3}, {4, 5, 6}, {7}}, 0, false, 3, 7},
		{"an empty scan ends the round", [][]int{{1, 2, 3}, {}}, 0, false, 2, 3},
		{"a failing repair ends the round after its batch", [][]int{{1, 2, 3}, {4, 5, 6}}, 2, false, 1, 2},
		{"a failing scan ends the round", [][]int{{1, 2, 3}, {4}}, 0, true, 2, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			m, err := newSweepMetrics(slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			scans, fixed := 0, 0
			s := sweeper[int]{name: "test", cfg: SweepConfig{BatchSize: 3, QueryTimeout: time.Second},
				describe: func(int) []any { return nil },
				scan: func(ctx context.Context, limit int) ([]int, error) {
					if limit != 3 {
						t.Fatalf("scan limit %d, want the batch size", limit)
					}
					scans++
					if tt.scanErr && scans == 2 {
						return nil, errors.New("database gone")
					}
					if scans > len(tt.batches) {
						t.Fatal("scanned past the last batch")
					}
					return tt.batches[scans-1], nil
				},
				repair: func(_ context.Context, c int) (engine.Swept, error) {
					if c == tt.failOn {
						return engine.Swept{}, errors.New("boom")
					}
					fixed++
					return engine.Swept{Applied: true, Outcome: "FIXED"}, nil
				}}
			s.round(context.Background(), m)
			if scans != tt.wantScans || fixed != tt.wantFixed {
				t.Fatalf("%d scans and %d repairs, want %d and %d", scans, fixed, tt.wantScans, tt.wantFixed)
			}
		})
	}
}
