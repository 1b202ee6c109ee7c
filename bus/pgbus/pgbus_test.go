package pgbus_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lucius-platform/lucius/base/pgtest"
	"github.com/lucius-platform/lucius/bus"
	"github.com/lucius-platform/lucius/bus/bustest"
	"github.com/lucius-platform/lucius/bus/pgbus"
)

func TestMain(m *testing.M) { pgtest.Main(m, pgbus.Migrations) }

// eventually bounds waits for something that must happen.
const eventually = 15 * time.Second

// newPool returns a pool on a fresh database, big enough for parallel tests.
func newPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(pgtest.NewDB(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 32
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// Warnings go to stderr: test loggers must not outlive their test, and the
// bus logs from background goroutines.
var logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

func newBus(t testing.TB, pool *pgxpool.Pool, cfg pgbus.Config) *pgbus.Bus {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = logger
	}
	b, err := pgbus.New(context.Background(), pool, cfg)
	if err != nil {
		t.Fatalf("new bus: %v", err)
	}
	t.Cleanup(func() {
		if err := b.Close(context.Background()); err != nil {
			t.Errorf("close bus: %v", err)
		}
	})
	return b
}

// TestConformance runs the suite with a Bus per case on one shared database,
// so cases also see each other's notifications.
func TestConformance(t *testing.T) {
	pool := newPool(t)
	bustest.Run(t, func(t *testing.T) bus.Bus { return newBus(t, pool, pgbus.Config{}) })
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		cfg     pgbus.Config
		wantErr bool
	}{
		{"zero takes defaults", pgbus.Config{}, false},
		{"explicit", pgbus.Config{PollInterval: time.Second, PurgeInterval: time.Hour}, false},
		{"negative poll", pgbus.Config{PollInterval: -time.Second}, true},
		{"negative purge", pgbus.Config{PurgeInterval: -time.Second}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if err := tc.cfg.Validate(); (err != nil) != tc.wantErr {
				t.Fatalf("Validate() = %v, want error %v", err, tc.wantErr)
			}
		})
	}
}

func mustSender(t *testing.T, b bus.Bus, entity string) bus.Sender {
	t.Helper()
	s, err := b.NewSender(t.Context(), entity)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func mustReceiver(t *testing.T, b bus.Bus, src bus.Source) bus.Receiver {
	t.Helper()
	r, err := b.NewReceiver(t.Context(), src)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(context.Background()) }) //nolint:errcheck
	return r
}

// drain receives and completes until want messages arrived, counting each id.
func drain(ctx context.Context, r bus.Receiver, want int, seen map[string]int, mu *sync.Mutex) error {
	for {
		mu.Lock()
		n := 0
		for _, c := range seen {
			n += c
		}
		mu.Unlock()
		if n >= want {
			return nil
		}
		msgs, err := r.Receive(ctx, 10)
		if err != nil {
			return err
		}
		for _, m := range msgs {
			mu.Lock()
			seen[m.ID]++
			mu.Unlock()
			if err := r.Complete(ctx, m); err != nil {
				return err
			}
		}
	}
}

func TestConcurrentSendersOfOneIDDeliverOnce(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := newBus(t, newPool(t), pgbus.Config{})
	if err := b.EnsureQueue(ctx, "q", bus.QueueOptions{}); err != nil {
		t.Fatal(err)
	}
	const senders, ids = 8, 20
	var wg sync.WaitGroup
	errs := make(chan error, senders)
	for i := range senders {
		s := mustSender(t, b, "q")
		wg.Add(1)
		go func() {
			defer wg.Done()
			for id := range ids {
				// Overlapping batches in different orders must not deadlock.
				batch := []bus.Message{{ID: fmt.Sprint(id)}, {ID: fmt.Sprint((id + i) % ids)}}
				if err := s.Send(ctx, batch...); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("send: %v", err)
	}
	seen := map[string]int{}
	var mu sync.Mutex
	rctx, cancel := context.WithTimeout(ctx, eventually)
	defer cancel()
	r := mustReceiver(t, b, bus.QueueSource("q"))
	if err := drain(rctx, r, ids, seen, &mu); err != nil {
		t.Fatal(err)
	}
	qctx, qcancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer qcancel()
	if msgs, _ := r.Receive(qctx, 10); len(msgs) > 0 {
		t.Fatalf("received %d extra messages, first %s", len(msgs), msgs[0].ID)
	}
	for id, n := range seen {
		if n != 1 {
			t.Errorf("id %s delivered %d times", id, n)
		}
	}
}

func TestTwoBusesCompeteOnOneQueue(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := newPool(t)
	b1, b2 := newBus(t, pool, pgbus.Config{}), newBus(t, pool, pgbus.Config{})
	if err := b1.EnsureQueue(ctx, "q", bus.QueueOptions{}); err != nil {
		t.Fatal(err)
	}
	const total = 300
	seen := map[string]int{}
	var (
		mu sync.Mutex
		wg sync.WaitGroup
	)
	rctx, cancel := context.WithTimeout(ctx, eventually)
	defer cancel()
	errs := make(chan error, 4)
	for _, b := range []bus.Bus{b1, b2, b1, b2} {
		r := mustReceiver(t, b, bus.QueueSource("q"))
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := drain(rctx, r, total, seen, &mu); err != nil && rctx.Err() == nil {
				errs <- err
			}
			cancel() // the others may be blocked: all messages are in
		}()
	}
	s1, s2 := mustSender(t, b1, "q"), mustSender(t, b2, "q")
	for i := 0; i < total; i += 10 {
		s := s1
		if i%20 == 0 {
			s = s2
		}
		batch := make([]bus.Message, 10)
		for j := range batch {
			batch[j] = bus.Message{ID: fmt.Sprint(i + j)}
		}
		if err := s.Send(ctx, batch...); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if len(seen) != total {
		t.Fatalf("received %d distinct messages, want %d", len(seen), total)
	}
	for id, n := range seen {
		if n != 1 {
			t.Errorf("id %s delivered %d times", id, n)
		}
	}
}

// blockedReceive starts a Receive on r and returns its result channel.
func blockedReceive(ctx context.Context, r bus.Receiver) <-chan error {
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(ctx, eventually)
		defer cancel()
		msgs, err := r.Receive(ctx, 1)
		if err == nil && len(msgs) != 1 {
			err = fmt.Errorf("received %d messages", len(msgs))
		}
		done <- err
	}()
	return done
}

// The receiving bus polls once a minute, so only a notification can wake it
// before the deadline.
func TestNotifyWakesReceiverOnAnotherBus(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := newPool(t)
	sending := newBus(t, pool, pgbus.Config{})
	receiving := newBus(t, pool, pgbus.Config{PollInterval: time.Minute})
	if err := sending.EnsureTopic(ctx, "t", bus.TopicOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := sending.EnsureSubscription(ctx, "t", "s", bus.SubscriptionOptions{}); err != nil {
		t.Fatal(err)
	}
	done := blockedReceive(ctx, mustReceiver(t, receiving, bus.SubscriptionSource("t", "s")))
	time.Sleep(300 * time.Millisecond) // let it block
	if err := mustSender(t, sending, "t").Send(ctx, bus.Message{ID: "m"}); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("blocked receive: %v", err)
	}
}

// After its listening connection dies the bus reconnects and listens again:
// a receiver that polls once a minute still wakes on the next send.
func TestListenerReconnects(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := newPool(t)
	sending := newBus(t, pool, pgbus.Config{})
	receiving := newBus(t, pool, pgbus.Config{PollInterval: time.Minute})
	if err := sending.EnsureQueue(ctx, "q", bus.QueueOptions{}); err != nil {
		t.Fatal(err)
	}
	r := mustReceiver(t, receiving, bus.QueueSource("q"))

	const listeners = `SELECT count(*) FROM pg_stat_activity
		WHERE datname = current_database() AND application_name LIKE 'lucius-bus-listener-%'`
	var killed int
	err := pool.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE datname = current_database() AND application_name LIKE 'lucius-bus-listener-%'`).Scan(&killed)
	if err != nil || killed != 2 {
		t.Fatalf("terminated %d listeners (%v), want 2", killed, err)
	}
	for deadline := time.Now().Add(eventually); ; time.Sleep(50 * time.Millisecond) {
		var n int
		if err := pool.QueryRow(ctx, listeners).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d listeners after %v, want 2", n, eventually)
		}
	}
	// The reconnect wakes the receiver once; let it find nothing and wait again.
	done := blockedReceive(ctx, r)
	time.Sleep(500 * time.Millisecond)
	if err := mustSender(t, sending, "q").Send(ctx, bus.Message{ID: "m"}); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("blocked receive: %v", err)
	}
}

func TestInvalidMessageFailsWholeBatch(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := newBus(t, newPool(t), pgbus.Config{})
	if err := b.EnsureQueue(ctx, "q", bus.QueueOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := mustSender(t, b, "q").Send(ctx, bus.Message{ID: "ok"}, bus.Message{}); err == nil {
		t.Fatal("send with a message without ID succeeded")
	}
	qctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if msgs, err := mustReceiver(t, b, bus.QueueSource("q")).Receive(qctx, 10); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("receive after a failed batch: %d messages, %v", len(msgs), err)
	}
}

func TestEntityNamesAreValidated(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := newBus(t, newPool(t), pgbus.Config{})
	for _, name := range []string{"", "a$b", "a/subscriptions/b", "trailing/", "-lead"} {
		if err := b.EnsureQueue(ctx, name, bus.QueueOptions{}); err == nil {
			t.Errorf("EnsureQueue(%q) succeeded", name)
		}
	}
	if err := b.EnsureTopic(ctx, "t", bus.TopicOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := b.EnsureQueue(ctx, "t", bus.QueueOptions{}); err == nil {
		t.Error("EnsureQueue succeeded on a topic's name")
	}
	if err := b.EnsureSubscription(ctx, "t", "a/b", bus.SubscriptionOptions{}); err == nil {
		t.Error("EnsureSubscription accepted a name with a slash")
	}
	if err := b.EnsureQueue(ctx, "orchestrator-jobs", bus.QueueOptions{MaxDeliveryCount: -1}); err == nil {
		t.Error("EnsureQueue accepted a negative max delivery count")
	}
}

func TestPurgeDeletesExpiredDuplicateIDs(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := newPool(t)
	b := newBus(t, pool, pgbus.Config{PurgeInterval: 100 * time.Millisecond})
	if err := b.EnsureQueue(ctx, "q", bus.QueueOptions{DuplicateDetectionWindow: 200 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	if err := mustSender(t, b, "q").Send(ctx, bus.Message{ID: "a"}, bus.Message{ID: "b"}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(eventually); ; time.Sleep(50 * time.Millisecond) {
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM bus_duplicates`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d duplicate-detection ids left after %v", n, eventually)
		}
	}
}

// A receiver that comes back after taking the last message waits for the
// next send instead of claiming an empty path: one claim per message, not
// two (plus the first Receive's, which finds the queue empty).
func TestDrainedPathWaitsForASendBeforeClaiming(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := newBus(t, newPool(t), pgbus.Config{PollInterval: time.Minute})
	if err := b.EnsureQueue(ctx, "q", bus.QueueOptions{}); err != nil {
		t.Fatal(err)
	}
	r, s := mustReceiver(t, b, bus.QueueSource("q")), mustSender(t, b, "q")
	const messages = 10
	for i := range messages {
		got := make(chan []*bus.Received, 1)
		go func() {
			msgs, err := r.Receive(ctx, 1)
			if err != nil {
				t.Errorf("receive: %v", err)
			}
			got <- msgs
		}()
		time.Sleep(100 * time.Millisecond) // let it block
		if err := s.Send(ctx, bus.Message{ID: fmt.Sprint(i)}); err != nil {
			t.Fatal(err)
		}
		msgs := <-got
		if len(msgs) != 1 || msgs[0].ID != fmt.Sprint(i) {
			t.Fatalf("message %d: received %v", i, msgs)
		}
		if err := r.Complete(ctx, msgs[0]); err != nil {
			t.Fatal(err)
		}
	}
	if claims := b.Claims(); claims > messages+1 {
		t.Fatalf("%d claims for %d messages; want at most %d", claims, messages, messages+1)
	}
}

// waitingReceive starts r.Receive(max) (for at most eventually) and returns
// once it has claimed in vain and waits; its messages come on the channel.
func waitingReceive(t *testing.T, b *pgbus.Bus, r bus.Receiver, max int) <-chan []*bus.Received {
	t.Helper()
	claims := b.Claims()
	done := make(chan []*bus.Received, 1)
	go func() {
		wait, cancel := context.WithTimeout(t.Context(), eventually)
		defer cancel()
		msgs, err := r.Receive(wait, max)
		if err != nil {
			t.Errorf("receive: %v", err)
		}
		done <- msgs
	}()
	awaitClaims(t, b, claims+1)
	return done
}

// awaitClaims waits until b has run n claims.
func awaitClaims(t *testing.T, b *pgbus.Bus, n int64) {
	t.Helper()
	for deadline := time.Now().Add(eventually); b.Claims() < n; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d claims after %v, want %d", b.Claims(), eventually, n)
		}
	}
}

// SendInTx writes with the caller's transaction: a rollback sends nothing,
// a commit sends, and announce wakes a receiver waiting for a wake-up.
func TestSendInTxSendsWithTheTransaction(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := newPool(t)
	b := newBus(t, pool, pgbus.Config{PollInterval: time.Minute})
	if err := b.EnsureQueue(ctx, "q", bus.QueueOptions{}); err != nil {
		t.Fatal(err)
	}
	if !b.InDatabase(pool) {
		t.Fatal("the bus is not in its own pool's database")
	}
	if b.InDatabase(newPool(t)) {
		t.Fatal("the bus is in another database")
	}
	other, err := pgxpool.New(ctx, pool.Config().ConnString())
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if !b.InDatabase(other) {
		t.Fatal("the bus is not in the database of another pool on it")
	}
	r := mustReceiver(t, b, bus.QueueSource("q"))
	inTx := func(id string, commit bool) func() {
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx) //nolint:errcheck
		announce, err := b.SendInTx(ctx, tx, "q", bus.Message{ID: id})
		if err != nil {
			t.Fatal(err)
		}
		if commit {
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
		}
		return announce
	}
	inTx("rolled-back", false)()
	done := waitingReceive(t, b, r, 10)
	inTx("committed", true)()
	msgs := <-done
	if len(msgs) != 1 || msgs[0].ID != "committed" {
		t.Fatalf("received %v, want only the committed message", msgs)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	if _, err := b.SendInTx(ctx, tx, "missing", bus.Message{ID: "x"}); !errors.Is(err, bus.ErrNotFound) {
		t.Fatalf("send to a missing queue: %v, want ErrNotFound", err)
	}
}

// Idle receivers wait for wake-ups, not on timers of their own: after each
// has found its path empty once, nothing claims again, however many poll
// intervals pass; the Bus's one poll statement per interval covers them all.
func TestIdleReceiversDoNotClaim(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := newBus(t, newPool(t), pgbus.Config{PollInterval: 50 * time.Millisecond})
	const paths = 32
	var blocked []<-chan error
	for i := range paths {
		q := fmt.Sprint("q", i)
		if err := b.EnsureQueue(ctx, q, bus.QueueOptions{}); err != nil {
			t.Fatal(err)
		}
		blocked = append(blocked, blockedReceive(ctx, mustReceiver(t, b, bus.QueueSource(q))))
	}
	awaitClaims(t, b, paths)
	polls := b.Polls()
	for deadline := time.Now().Add(eventually); b.Polls() < polls+10; time.Sleep(10 * time.Millisecond) { // ten poll intervals
		if time.Now().After(deadline) {
			t.Fatalf("%d polls after %v, want 10", b.Polls()-polls, eventually)
		}
	}
	if claims := b.Claims(); claims != paths {
		t.Fatalf("%d claims by %d idle receivers over ten poll intervals, want %d (the first ones)", claims, paths, paths)
	}
	select {
	case err := <-blocked[0]:
		t.Fatalf("an idle receive returned: %v", err)
	default:
	}
}

// A message that becomes claimable with no notification (here: inserted
// locked, as if its holder in another process died, the lock expiring half
// a second later) is found by the poll and wakes a receiver that is waiting
// for a wake-up after finding its path empty.
func TestPollWakesReceiverWithoutNotification(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := newPool(t)
	b := newBus(t, pool, pgbus.Config{PollInterval: 100 * time.Millisecond})
	if err := b.EnsureQueue(ctx, "q", bus.QueueOptions{}); err != nil {
		t.Fatal(err)
	}
	done := waitingReceive(t, b, mustReceiver(t, b, bus.QueueSource("q")), 1)
	_, err := pool.Exec(ctx, `INSERT INTO bus_messages (path, available_at, lock_token, delivery_count, enqueued_at, expires_at, message_id, body)
		VALUES ('q', now() + interval '500 milliseconds', gen_random_uuid(), 1, now(), now() + interval '1 hour', 'orphan', '')`)
	if err != nil {
		t.Fatal(err)
	}
	msgs := <-done
	if len(msgs) != 1 || msgs[0].ID != "orphan" || msgs[0].DeliveryCount != 2 {
		t.Fatalf("received %v, want the orphaned message on its second delivery", msgs)
	}
}

// A receiver waiting after an empty claim still takes back a message whose
// lock expired (its holder died) when the lock expires, not at the next
// poll: the wait ends at the earliest lock expiry of the path.
func TestExpiredLockIsTakenBackBeforeThePoll(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := newBus(t, newPool(t), pgbus.Config{PollInterval: time.Minute})
	if err := b.EnsureQueue(ctx, "q", bus.QueueOptions{LockDuration: time.Second}); err != nil {
		t.Fatal(err)
	}
	r := mustReceiver(t, b, bus.QueueSource("q"))
	if err := mustSender(t, b, "q").Send(ctx, bus.Message{ID: "m"}); err != nil {
		t.Fatal(err)
	}
	first, err := r.Receive(ctx, 1)
	if err != nil || len(first) != 1 {
		t.Fatalf("first receive: %v %v", first, err)
	}
	// Not completed: the lock runs out after a second.
	wait, cancel := context.WithTimeout(ctx, eventually)
	defer cancel()
	again, err := r.Receive(wait, 1)
	if err != nil || len(again) != 1 || again[0].ID != "m" || again[0].DeliveryCount != 2 {
		t.Fatalf("receive after the lock expired: %v %v", again, err)
	}
}
