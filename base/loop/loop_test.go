package loop

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

func TestDrainStopsOnShortBatchOrError(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		batches   []int64
		failAt    int
		wantTotal int64
		wantCalls int
		wantErr   bool
	}{
		{"one short batch", []int64{3}, -1, 3, 1, false},
		{"full batches then short", []int64{10, 10, 4}, -1, 24, 3, false},
		{"full batch then empty", []int64{10, 0}, -1, 10, 2, false},
		{"error stops", []int64{10, 10, 10}, 1, 10, 2, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			calls := 0
			total, err := Drain(context.Background(), 10, time.Second, func(ctx context.Context, limit int) (int64, error) {
				i := calls
				calls++
				if i == tt.failAt {
					return 0, errors.New("boom")
				}
				return tt.batches[i], nil
			})
			if total != tt.wantTotal || calls != tt.wantCalls || (err != nil) != tt.wantErr {
				t.Fatalf("total %d calls %d err %v; want %d %d err=%v", total, calls, err, tt.wantTotal, tt.wantCalls, tt.wantErr)
			}
		})
	}
}

func TestEveryRunsUntilCancelled(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	var n atomic.Int32
	done := make(chan struct{})
	go func() {
		Every(ctx, time.Millisecond, true, func(context.Context) {
			if n.Add(1) == 3 {
				cancel()
			}
		})
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Every did not return after its context was cancelled")
	}
	if n.Load() < 3 {
		t.Fatalf("fn ran %d times, want at least 3", n.Load())
	}
}

func TestSleepReportsWhetherTheWholeWaitPassed(t *testing.T) {
	t.Parallel()
	if !Sleep(context.Background(), time.Millisecond) {
		t.Error("an uncancelled sleep reported it was cut short")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if Sleep(ctx, time.Hour) {
		t.Error("a sleep on an ended context reported the whole wait")
	}
}
