package bus_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lucius-platform/lucius/bus"
	"github.com/lucius-platform/lucius/bus/membus"
)

// queueWith returns a receiver on a fresh in-memory queue holding n messages
// with bodies "0" … "n-1".
func queueWith(t *testing.T, n int) bus.Receiver {
	t.Helper()
	ctx := context.Background()
	b, err := membus.New(membus.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close(ctx) })
	if err := b.EnsureQueue(ctx, "q", bus.QueueOptions{}); err != nil {
		t.Fatal(err)
	}
	s, err := b.NewSender(ctx, "q")
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if err := s.Send(ctx, bus.Message{ID: strconv.Itoa(i), Body: []byte(strconv.Itoa(i))}); err != nil {
			t.Fatal(err)
		}
	}
	r, err := b.NewReceiver(ctx, bus.QueueSource("q"))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestConsume(t *testing.T) {
	const n = 40
	tests := []struct {
		name        string
		concurrency int
		ordered     bool
	}{
		{"one after another keeps the order", 1, true},
		{"several at once stay within the bound", 4, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := queueWith(t, n)
			ctx, cancel := context.WithCancel(context.Background())
			var mu sync.Mutex
			var got []string
			var running, peak atomic.Int32
			done := make(chan struct{})
			go func() {
				defer close(done)
				bus.Consume(ctx, r, bus.ConsumeOptions{Batch: 8, Concurrency: tc.concurrency}, func(ctx context.Context, m *bus.Received) {
					raisePeak(&peak, running.Add(1))
					time.Sleep(time.Millisecond)
					mu.Lock()
					got = append(got, string(m.Body))
					if len(got) == n {
						cancel()
					}
					mu.Unlock()
					if err := r.Complete(ctx, m); err != nil && ctx.Err() == nil {
						t.Error(err)
					}
					running.Add(-1)
				})
			}()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("Consume did not return after its context ended")
			}
			if running.Load() != 0 {
				t.Fatal("Consume returned before its handlers")
			}
			if len(got) != n {
				t.Fatalf("handled %d messages, want %d", len(got), n)
			}
			if p := peak.Load(); p > int32(tc.concurrency) || (tc.concurrency > 1 && p < 2) {
				t.Fatalf("peak concurrency %d with Concurrency %d", p, tc.concurrency)
			}
			if tc.ordered {
				for i, body := range got {
					if body != strconv.Itoa(i) {
						t.Fatalf("position %d handled message %s", i, body)
					}
				}
			}
		})
	}
}

// raisePeak records now in peak when it is higher.
func raisePeak(peak *atomic.Int32, now int32) {
	for p := peak.Load(); now > p; p = peak.Load() {
		if peak.CompareAndSwap(p, now) {
			return
		}
	}
}

// countingReceiver counts its Receives.
type countingReceiver struct {
	bus.Receiver
	receives atomic.Int32
}

func (r *countingReceiver) Receive(ctx context.Context, max int) ([]*bus.Received, error) {
	r.receives.Add(1)
	return r.Receiver.Receive(ctx, max)
}

func TestConsumeOneAtATimeHandlesABatchBeforeReceivingAgain(t *testing.T) {
	t.Parallel()
	const n, batch = 9, 3
	r := &countingReceiver{Receiver: queueWith(t, n)}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	handled := 0
	bus.Consume(ctx, r, bus.ConsumeOptions{Batch: batch}, func(ctx context.Context, m *bus.Received) {
		time.Sleep(time.Millisecond) // room for a Receive that should not happen
		if got, want := r.receives.Load(), int32(handled/batch+1); got != want {
			t.Errorf("message %s handled after %d receives, want %d", m.ID, got, want)
		}
		if err := r.Complete(ctx, m); err != nil {
			t.Error(err)
		}
		if handled++; handled == n {
			cancel()
		}
	})
	if handled != n {
		t.Fatalf("handled %d messages, want %d", handled, n)
	}
}

// failingReceiver fails every Receive.
type failingReceiver struct{ bus.Receiver }

func (failingReceiver) Receive(context.Context, int) ([]*bus.Received, error) {
	return nil, errors.New("broker unreachable")
}

func TestConsumeReportsFailedReceivesAndRetries(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var failures atomic.Int32
	done := make(chan struct{})
	go func() {
		defer close(done)
		bus.Consume(ctx, failingReceiver{}, bus.ConsumeOptions{RetryDelay: time.Millisecond,
			OnError: func(_ context.Context, _ error, retryIn time.Duration) {
				if retryIn != time.Millisecond {
					t.Errorf("retry in %v, want RetryDelay (1ms)", retryIn)
				}
				if failures.Add(1) == 3 {
					cancel()
				}
			}}, func(context.Context, *bus.Received) { t.Error("handled a message no Receive returned") })
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Consume kept going after its context ended")
	}
	if failures.Load() != 3 {
		t.Fatalf("%d failures reported, want 3", failures.Load())
	}
}

// closedReceiver is a receiver whose bus was closed.
type closedReceiver struct{ bus.Receiver }

func (closedReceiver) Receive(context.Context, int) ([]*bus.Received, error) {
	return nil, bus.ErrClosed
}

func TestConsumeEndsWhenTheReceiverIsClosed(t *testing.T) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		bus.Consume(context.Background(), closedReceiver{}, bus.ConsumeOptions{
			OnError: func(context.Context, error, time.Duration) { t.Error("a closed receiver reported as a failure") }},
			func(context.Context, *bus.Received) {})
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Consume kept receiving from a closed receiver")
	}
}

// scriptedReceiver answers each Receive with the next step of its script:
// 'x' fails, '1' returns one message. When the script runs out it ends the
// loop (cancel) and reports the context's error.
type scriptedReceiver struct {
	bus.Receiver
	script string
	cancel context.CancelFunc

	mu    sync.Mutex
	steps int
}

func (r *scriptedReceiver) Receive(ctx context.Context, _ int) ([]*bus.Received, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.steps == len(r.script) {
		r.cancel()
		return nil, ctx.Err()
	}
	step := r.script[r.steps]
	r.steps++
	if step == 'x' {
		return nil, errors.New("broker unreachable")
	}
	return []*bus.Received{{Message: bus.Message{ID: strconv.Itoa(r.steps)}}}, nil
}

func TestConsumeBackoffGrowsWithFailuresInARowAndResetsAfterASuccess(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		script string
		want   []int // the failures in a row Backoff is asked about, one per failed Receive
	}{
		{"grows with each failure in a row", "xxxx", []int{0, 1, 2, 3}},
		{"starts again after a success", "xxx1xx", []int{0, 1, 2, 0, 1}},
		{"every success resets it", "x1x1x", []int{0, 0, 0}},
		{"not asked while receives succeed", "111", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var asked []int
			var heard []time.Duration
			var handled atomic.Int32
			bus.Consume(ctx, &scriptedReceiver{script: tc.script, cancel: cancel}, bus.ConsumeOptions{
				RetryDelay: time.Hour, // Backoff replaces it
				Backoff: func(failures int) time.Duration {
					asked = append(asked, failures)
					return time.Duration(failures+1) * time.Microsecond
				},
				OnError: func(_ context.Context, _ error, retryIn time.Duration) { heard = append(heard, retryIn) },
			}, func(context.Context, *bus.Received) { handled.Add(1) })
			if !slices.Equal(asked, tc.want) {
				t.Fatalf("Backoff asked for %v, want %v", asked, tc.want)
			}
			for i, d := range heard {
				if want := time.Duration(tc.want[i]+1) * time.Microsecond; d != want {
					t.Fatalf("failure %d reported retry in %v, want Backoff's %v", i, d, want)
				}
			}
			if len(heard) != len(tc.want) {
				t.Fatalf("OnError heard %d failures, want %d", len(heard), len(tc.want))
			}
			if want := int32(strings.Count(tc.script, "1")); handled.Load() != want {
				t.Fatalf("handled %d messages, want %d", handled.Load(), want)
			}
		})
	}
}

func TestConsumeSharedSlotsBoundHandlersAcrossLoops(t *testing.T) {
	t.Parallel()
	const perQueue, shared = 20, 2
	receivers := []bus.Receiver{queueWith(t, perQueue), queueWith(t, perQueue)}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	slots := make(chan struct{}, shared)
	var running, peak, handled atomic.Int32
	var loops sync.WaitGroup
	for _, r := range receivers {
		loops.Go(func() {
			bus.Consume(ctx, r, bus.ConsumeOptions{Batch: 4, Concurrency: 8, Slots: slots}, func(ctx context.Context, m *bus.Received) {
				raisePeak(&peak, running.Add(1))
				time.Sleep(2 * time.Millisecond)
				running.Add(-1)
				if err := r.Complete(ctx, m); err != nil && ctx.Err() == nil {
					t.Error(err)
				}
				if handled.Add(1) == 2*perQueue {
					cancel()
				}
			})
		})
	}
	waitFor(t, &loops, "the loops sharing slots")
	if handled.Load() != 2*perQueue {
		t.Fatalf("handled %d messages, want %d", handled.Load(), 2*perQueue)
	}
	if p := peak.Load(); p > shared || p < 2 {
		t.Fatalf("peak %d handlers across two loops sharing %d slots (Concurrency 8 each is ignored)", p, shared)
	}
}

func TestConsumeOnReceiveSeesEachBatchBeforeItsHandlers(t *testing.T) {
	t.Parallel()
	const n = 12
	r := queueWith(t, n)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	received := map[string]bool{}
	var handled atomic.Int32
	bus.Consume(ctx, r, bus.ConsumeOptions{Batch: 5, Concurrency: 3,
		OnReceive: func(msgs []*bus.Received) {
			if len(msgs) == 0 {
				t.Error("OnReceive given an empty batch")
			}
			mu.Lock()
			defer mu.Unlock()
			for _, m := range msgs {
				received[m.ID] = true
			}
		}}, func(ctx context.Context, m *bus.Received) {
		mu.Lock()
		seen := received[m.ID]
		mu.Unlock()
		if !seen {
			t.Errorf("message %s handled before OnReceive saw it", m.ID)
		}
		if err := r.Complete(ctx, m); err != nil && ctx.Err() == nil {
			t.Error(err)
		}
		if handled.Add(1) == n {
			cancel()
		}
	})
	if len(received) != n || handled.Load() != n {
		t.Fatalf("OnReceive saw %d messages and %d were handled, want %d each", len(received), handled.Load(), n)
	}
}

func TestConsumeReportsMessagesNeverStartedWhenCtxEnds(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		opts bus.ConsumeOptions
		// beside: handlers run beside the loop, so the first one can hold
		// the only slot until Consume has returned.
		beside bool
	}{
		{"one at a time", bus.ConsumeOptions{}, false},
		{"a slot of its own", bus.ConsumeOptions{Concurrency: 1, Slots: make(chan struct{}, 1)}, true},
		{"a slot shared with other loops", bus.ConsumeOptions{Concurrency: 4, Slots: make(chan struct{}, 1)}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := queueWith(t, 4)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			release := make(chan struct{})
			var mu sync.Mutex
			var handled, dropped []string
			var handlers sync.WaitGroup
			opts := tc.opts
			opts.Batch, opts.Handlers = 4, &handlers
			opts.OnDropped = func(m *bus.Received) {
				mu.Lock()
				dropped = append(dropped, m.ID)
				mu.Unlock()
			}
			returned := make(chan struct{})
			go func() {
				defer close(returned)
				bus.Consume(ctx, r, opts, func(_ context.Context, m *bus.Received) {
					mu.Lock()
					handled = append(handled, m.ID)
					mu.Unlock()
					cancel() // ctx ends while three messages wait for the slot
					if tc.beside {
						<-release
					}
				})
			}()
			select {
			case <-returned:
			case <-time.After(10 * time.Second):
				t.Fatal("Consume did not return after its context ended")
			}
			close(release)
			waitFor(t, &handlers, "the handler")
			if !slices.Equal(handled, []string{"0"}) {
				t.Fatalf("handled %v, want only the first message", handled)
			}
			if !slices.Equal(dropped, []string{"1", "2", "3"}) {
				t.Fatalf("dropped %v, want the three waiting for the slot", dropped)
			}
		})
	}
}

func TestConsumeLetsHandlersOnTheirOwnContextFinishAfterCtxEnds(t *testing.T) {
	t.Parallel()
	r := queueWith(t, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	work := context.WithoutCancel(ctx) // outlives ctx, as a worker's in-flight attempts do
	release := make(chan struct{})
	var settled atomic.Bool
	var handlers sync.WaitGroup
	returned := make(chan struct{})
	go func() {
		defer close(returned)
		bus.Consume(ctx, r, bus.ConsumeOptions{Concurrency: 2, Handlers: &handlers,
			OnDropped: func(m *bus.Received) { t.Errorf("message %s dropped after it started", m.ID) },
		}, func(_ context.Context, m *bus.Received) {
			cancel() // ctx ends while the handler runs
			<-release
			if err := r.Complete(work, m); err != nil {
				t.Errorf("complete after ctx ended: %v", err)
				return
			}
			settled.Store(true)
		})
	}()
	// With Handlers set, Consume returns while its handler still runs.
	select {
	case <-returned:
	case <-time.After(10 * time.Second):
		t.Fatal("Consume waited for a handler the caller tracks")
	}
	close(release)
	waitFor(t, &handlers, "the handler")
	if !settled.Load() {
		t.Fatal("the handler did not settle its message on its own context")
	}
}

// waitFor waits for wg, failing the test after 10s.
func waitFor(t *testing.T, wg *sync.WaitGroup, what string) {
	t.Helper()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s did not return", what)
	}
}
