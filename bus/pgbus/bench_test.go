package pgbus_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lucius-platform/lucius/bus"
	"github.com/lucius-platform/lucius/bus/pgbus"
)

// BenchmarkSendReceiveComplete measures throughput: one producer sends b.N
// messages in batches while four consumers receive batches of the same size
// and complete the messages of a batch concurrently.
func BenchmarkSendReceiveComplete(b *testing.B) {
	for _, batch := range []int{1, 10, 100} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			const consumers, completers = 4, 8
			ctx := b.Context()
			pb := newBus(b, newPool(b), pgbus.Config{})
			if err := pb.EnsureQueue(ctx, "bench", bus.QueueOptions{}); err != nil {
				b.Fatal(err)
			}
			s, err := pb.NewSender(ctx, "bench")
			if err != nil {
				b.Fatal(err)
			}
			var receivers []bus.Receiver
			for range consumers {
				r, err := pb.NewReceiver(ctx, bus.QueueSource("bench"))
				if err != nil {
					b.Fatal(err)
				}
				receivers = append(receivers, r)
			}

			cctx, cancel := context.WithCancel(ctx)
			defer cancel()
			var (
				completed atomic.Int64
				errOnce   sync.Once
				firstErr  error
				wg        sync.WaitGroup
			)
			fail := func(err error) {
				errOnce.Do(func() { firstErr = err })
				cancel()
			}
			b.ResetTimer()
			start := time.Now()
			for _, r := range receivers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					sem := make(chan struct{}, completers)
					for cctx.Err() == nil {
						msgs, err := r.Receive(cctx, batch)
						if err != nil {
							if cctx.Err() == nil {
								fail(err)
							}
							return
						}
						var inner sync.WaitGroup
						for _, m := range msgs {
							sem <- struct{}{}
							inner.Add(1)
							go func() {
								defer func() { <-sem; inner.Done() }()
								if err := r.Complete(cctx, m); err != nil {
									fail(err)
									return
								}
								if completed.Add(1) == int64(b.N) {
									cancel()
								}
							}()
						}
						inner.Wait()
					}
				}()
			}
			for sent := 0; sent < b.N; {
				n := min(batch, b.N-sent)
				msgs := make([]bus.Message, n)
				for i := range msgs {
					msgs[i] = bus.Message{ID: fmt.Sprint(sent + i), Body: []byte(`{"step":"x","attempt":1}`),
						ContentType: "application/json", Properties: map[string]string{"kind": "step"}}
				}
				if err := s.Send(cctx, msgs...); err != nil {
					b.Fatalf("send: %v", err)
				}
				sent += n
			}
			wg.Wait()
			elapsed := time.Since(start)
			b.StopTimer()
			if firstErr != nil {
				b.Fatal(firstErr)
			}
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "msgs/s")
		})
	}
}

// BenchmarkSendToReceiveLatency measures one hop: the time from starting a
// Send of one message until a receiver blocked on the empty queue returns it.
// "same-bus" wakes the receiver in process; "other-bus" goes through
// NOTIFY and another Bus's listening connection, as between services.
func BenchmarkSendToReceiveLatency(b *testing.B) {
	for _, mode := range []string{"same-bus", "other-bus"} {
		b.Run(mode, func(b *testing.B) {
			ctx := b.Context()
			pool := newPool(b)
			sending := newBus(b, pool, pgbus.Config{})
			receiving := sending
			if mode == "other-bus" {
				receiving = newBus(b, pool, pgbus.Config{})
			}
			if err := sending.EnsureQueue(ctx, "hop", bus.QueueOptions{}); err != nil {
				b.Fatal(err)
			}
			s, err := sending.NewSender(ctx, "hop")
			if err != nil {
				b.Fatal(err)
			}
			r, err := receiving.NewReceiver(ctx, bus.QueueSource("hop"))
			if err != nil {
				b.Fatal(err)
			}
			type result struct {
				at  time.Time
				err error
			}
			results := make(chan result)
			next := make(chan struct{})
			go func() {
				for range next {
					msgs, err := r.Receive(ctx, 1)
					at := time.Now()
					if err == nil {
						err = r.Complete(ctx, msgs[0])
					}
					results <- result{at, err}
				}
			}()
			defer close(next)

			latencies := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := range b.N {
				next <- struct{}{}
				time.Sleep(time.Millisecond) // let the receiver block
				start := time.Now()
				if err := s.Send(ctx, bus.Message{ID: fmt.Sprint(i)}); err != nil {
					b.Fatal(err)
				}
				res := <-results
				if res.err != nil {
					b.Fatal(res.err)
				}
				latencies = append(latencies, res.at.Sub(start))
			}
			b.StopTimer()
			slices.Sort(latencies)
			pct := func(p float64) float64 {
				return float64(latencies[int(p*float64(len(latencies)-1))]) / float64(time.Millisecond)
			}
			b.ReportMetric(pct(0.50), "p50-ms")
			b.ReportMetric(pct(0.99), "p99-ms")
		})
	}
}
