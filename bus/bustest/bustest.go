// Package bustest is the conformance suite every bus.Bus implementation
// passes, so the PostgreSQL bus and the Service Bus adapter behave alike:
//
//	func TestConformance(t *testing.T) {
//		bustest.Run(t, func(t *testing.T) bus.Bus { return newBus(t) })
//	}
//
// Each case runs in parallel with entities of its own, so newBus may return
// buses that share one namespace. The suite checks behaviour, never speed:
// waits for something that must happen use a generous deadline, and waits
// that prove something does not happen are short. Lock durations, TTLs and
// duplicate-detection windows are below a second or two to keep it fast.
package bustest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lucius-platform/lucius/bus"
)

// Timing of the suite.
const (
	// eventually bounds a wait for something that must happen.
	eventually = 15 * time.Second
	// quiet is how long a receive must stay empty to show nothing is there.
	quiet = 300 * time.Millisecond
	// shortLock is a lock duration the suite can wait out.
	shortLock = 500 * time.Millisecond
	// longLock outlasts any test, so redelivery cannot come from lock expiry.
	longLock = 2 * time.Minute
	// skew tolerates clock differences between the test and the bus.
	skew = 50 * time.Millisecond
)

// Run runs the suite. newBus is called once per case with the case's t and
// should register any cleanup (Close) itself; closing twice must be harmless.
func Run(t *testing.T, newBus func(t *testing.T) bus.Bus) {
	t.Helper()
	cases := []struct {
		name string
		test func(*testing.T, *env)
	}{
		{"QueueSendReceiveComplete", testQueueSendReceiveComplete},
		{"MessageFieldsRoundTrip", testMessageFieldsRoundTrip},
		{"BatchSendKeepsOrder", testBatchSendKeepsOrder},
		{"LargeSendDeliversEveryMessage", testLargeSend},
		{"ReceiveReturnsAtMostMax", testReceiveReturnsAtMostMax},
		{"TopicFansOutToEverySubscription", testTopicFanOut},
		{"CorrelationFilters", testCorrelationFilters},
		{"EnsureUpdatesOptions", testEnsureUpdatesOptions},
		{"ConcurrentEnsureSucceeds", testConcurrentEnsure},
		{"PeekLockHidesMessage", testPeekLockHidesMessage},
		{"LockExpiryRedelivers", testLockExpiryRedelivers},
		{"SettleAfterLockExpiryFails", testSettleAfterLockExpiryFails},
		{"RenewLockKeepsMessage", testRenewLockKeepsMessage},
		{"AbandonRedeliversAtOnce", testAbandonRedeliversAtOnce},
		{"MaxDeliveryCountDeadLetters", testMaxDeliveryCountDeadLetters},
		{"MaxDeliveryCountAfterLockExpiry", testMaxDeliveryCountAfterLockExpiry},
		{"ExplicitDeadLetter", testExplicitDeadLetter},
		{"SubscriptionDeadLetter", testSubscriptionDeadLetter},
		{"TTLExpiryDeadLetters", testTTLExpiryDeadLetters},
		{"TTLExpiryDrops", testTTLExpiryDrops},
		{"ScheduledEnqueue", testScheduledEnqueue},
		{"DuplicateDetection", testDuplicateDetection},
		{"DuplicateDetectionOnTopic", testDuplicateDetectionOnTopic},
		{"CompetingConsumers", testCompetingConsumers},
		{"ReceiveWakesOnSend", testReceiveWakesOnSend},
		{"ReceiveWakesOnTopicSend", testReceiveWakesOnTopicSend},
		{"ReceiveReturnsContextError", testReceiveReturnsContextError},
		{"UnknownEntityNotFound", testUnknownEntityNotFound},
		{"SettleTwiceLosesLock", testSettleTwiceLosesLock},
		{"CloseSenderAndReceiver", testCloseSenderAndReceiver},
		{"CloseBus", testCloseBus},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.test(t, &env{t: t, b: newBus(t)})
		})
	}
}

// env is one case's bus and helpers. Helpers fail the test on error, so they
// must run on the test's goroutine.
type env struct {
	t *testing.T
	b bus.Bus
}

func (e *env) ctx() context.Context { return e.t.Context() }

// name returns a unique entity name for this test.
func (e *env) name(kind string) string {
	slug := e.t.Name()
	if i := strings.LastIndexByte(slug, '/'); i >= 0 {
		slug = slug[i+1:]
	}
	slug = strings.ToLower(slug)
	if len(slug) > 24 {
		slug = slug[:24]
	}
	return fmt.Sprintf("bt-%s-%s-%08x", kind, slug, rand.Uint32()) //nolint:gosec // G404: a unique test entity name
}

func (e *env) queue(opts bus.QueueOptions) string {
	e.t.Helper()
	q := e.name("q")
	if err := e.b.EnsureQueue(e.ctx(), q, opts); err != nil {
		e.t.Fatalf("ensure queue: %v", err)
	}
	return q
}

func (e *env) topic(opts bus.TopicOptions) string {
	e.t.Helper()
	name := e.name("t")
	if err := e.b.EnsureTopic(e.ctx(), name, opts); err != nil {
		e.t.Fatalf("ensure topic: %v", err)
	}
	return name
}

func (e *env) subscription(topic, name string, opts bus.SubscriptionOptions) bus.Source {
	e.t.Helper()
	if err := e.b.EnsureSubscription(e.ctx(), topic, name, opts); err != nil {
		e.t.Fatalf("ensure subscription %s: %v", name, err)
	}
	return bus.SubscriptionSource(topic, name)
}

func (e *env) sender(entity string) bus.Sender {
	e.t.Helper()
	s, err := e.b.NewSender(e.ctx(), entity)
	if err != nil {
		e.t.Fatalf("new sender %s: %v", entity, err)
	}
	e.t.Cleanup(func() { s.Close(context.Background()) }) //nolint:errcheck
	return s
}

func (e *env) receiver(src bus.Source) bus.Receiver {
	e.t.Helper()
	r, err := e.b.NewReceiver(e.ctx(), src)
	if err != nil {
		e.t.Fatalf("new receiver %s: %v", src, err)
	}
	e.t.Cleanup(func() { r.Close(context.Background()) }) //nolint:errcheck
	return r
}

func (e *env) send(entity string, msgs ...bus.Message) {
	e.t.Helper()
	if err := e.sender(entity).Send(e.ctx(), msgs...); err != nil {
		e.t.Fatalf("send to %s: %v", entity, err)
	}
}

// receive waits for one message.
func (e *env) receive(r bus.Receiver) *bus.Received {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(e.ctx(), eventually)
	defer cancel()
	msgs, err := r.Receive(ctx, 1)
	if err != nil {
		e.t.Fatalf("receive: %v", err)
	}
	if len(msgs) != 1 {
		e.t.Fatalf("receive(max 1) returned %d messages", len(msgs))
	}
	return msgs[0]
}

// receiveN receives until n messages arrived, in batches of up to max.
func (e *env) receiveN(r bus.Receiver, n, max int) []*bus.Received {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(e.ctx(), eventually)
	defer cancel()
	var got []*bus.Received
	for len(got) < n {
		msgs, err := r.Receive(ctx, max)
		if err != nil {
			e.t.Fatalf("receive after %d of %d messages: %v", len(got), n, err)
		}
		if len(msgs) == 0 || len(msgs) > max {
			e.t.Fatalf("receive(max %d) returned %d messages", max, len(msgs))
		}
		got = append(got, msgs...)
	}
	if len(got) > n {
		e.t.Fatalf("received %d messages, want %d", len(got), n)
	}
	return got
}

// empty checks that nothing is received for a while.
func (e *env) empty(r bus.Receiver, wait time.Duration) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(e.ctx(), wait)
	defer cancel()
	msgs, err := r.Receive(ctx, 10)
	if len(msgs) > 0 {
		e.t.Fatalf("received %d unexpected messages, first %q (delivery %d)", len(msgs), msgs[0].ID, msgs[0].DeliveryCount)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		e.t.Fatalf("receive on an empty source: got %v, want context.DeadlineExceeded", err)
	}
}

func (e *env) complete(r bus.Receiver, msgs ...*bus.Received) {
	e.t.Helper()
	for _, m := range msgs {
		if err := r.Complete(e.ctx(), m); err != nil {
			e.t.Fatalf("complete %s: %v", m.ID, err)
		}
	}
}

func (e *env) abandon(r bus.Receiver, m *bus.Received) {
	e.t.Helper()
	if err := r.Abandon(e.ctx(), m); err != nil {
		e.t.Fatalf("abandon %s: %v", m.ID, err)
	}
}

func wantID(t *testing.T, m *bus.Received, id string) {
	t.Helper()
	if m.ID != id {
		t.Fatalf("received %q, want %q", m.ID, id)
	}
}

func wantLockLost(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, bus.ErrLockLost) {
		t.Fatalf("%s: got %v, want an error wrapping bus.ErrLockLost", what, err)
	}
}

func ids(msgs []*bus.Received) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = m.ID
	}
	return out
}

func sortedIDs(msgs []*bus.Received) []string {
	out := ids(msgs)
	slices.Sort(out)
	return out
}

func toReceived(msgs []bus.Message) []*bus.Received {
	out := make([]*bus.Received, len(msgs))
	for i, m := range msgs {
		out[i] = &bus.Received{Message: m}
	}
	return out
}

func numbered(prefix string, n int) []bus.Message {
	msgs := make([]bus.Message, n)
	for i := range msgs {
		msgs[i] = bus.Message{ID: fmt.Sprintf("%s-%03d", prefix, i), Body: []byte(fmt.Sprintf("body %d", i))}
	}
	return msgs
}

func testQueueSendReceiveComplete(t *testing.T, e *env) {
	q := e.queue(bus.QueueOptions{})
	r := e.receiver(bus.QueueSource(q))
	e.send(q, bus.Message{ID: "m1", Body: []byte("hello")})
	m := e.receive(r)
	wantID(t, m, "m1")
	if string(m.Body) != "hello" || m.DeliveryCount != 1 {
		t.Fatalf("received body %q delivery %d, want \"hello\" delivery 1", m.Body, m.DeliveryCount)
	}
	e.complete(r, m)
	e.empty(r, quiet)
}

func testMessageFieldsRoundTrip(t *testing.T, e *env) {
	q := e.queue(bus.QueueOptions{})
	r := e.receiver(bus.QueueSource(q))
	sent := bus.Message{
		ID:            "fields-1",
		Body:          []byte{0, 1, 2, 0xff, '{', '}'},
		ContentType:   "application/json",
		Properties:    map[string]string{"kind": "job.created", "tenant": "t-1", "traceparent": "00-abc-def-01", "empty": ""},
		Key:           "tenant-1doc-9",
		CorrelationID: "corr-42",
		Subject:       "job/123",
	}
	before := time.Now()
	e.send(q, sent)
	m := e.receive(r)
	switch {
	case m.ID != sent.ID:
		t.Errorf("ID = %q, want %q", m.ID, sent.ID)
	case !bytes.Equal(m.Body, sent.Body):
		t.Errorf("Body = %v, want %v", m.Body, sent.Body)
	case m.ContentType != sent.ContentType:
		t.Errorf("ContentType = %q, want %q", m.ContentType, sent.ContentType)
	case !maps.Equal(m.Properties, sent.Properties):
		t.Errorf("Properties = %v, want %v", m.Properties, sent.Properties)
	case m.Key != sent.Key:
		t.Errorf("Key = %q, want %q", m.Key, sent.Key)
	case m.CorrelationID != sent.CorrelationID:
		t.Errorf("CorrelationID = %q, want %q", m.CorrelationID, sent.CorrelationID)
	case m.Subject != sent.Subject:
		t.Errorf("Subject = %q, want %q", m.Subject, sent.Subject)
	}
	if m.DeliveryCount != 1 {
		t.Errorf("DeliveryCount = %d, want 1", m.DeliveryCount)
	}
	if m.SequenceNumber <= 0 {
		t.Errorf("SequenceNumber = %d, want > 0", m.SequenceNumber)
	}
	if m.LockToken == "" {
		t.Error("LockToken is empty")
	}
	if m.EnqueuedAt.Before(before.Add(-time.Minute)) || m.EnqueuedAt.After(time.Now().Add(time.Minute)) {
		t.Errorf("EnqueuedAt = %v, not around the send at %v", m.EnqueuedAt, before)
	}
	if !m.LockedUntil.After(m.EnqueuedAt) {
		t.Errorf("LockedUntil %v is not after EnqueuedAt %v", m.LockedUntil, m.EnqueuedAt)
	}
	if m.DeadLetterReason != "" || m.DeadLetterDescription != "" {
		t.Errorf("dead-letter fields set on a live message: %q %q", m.DeadLetterReason, m.DeadLetterDescription)
	}
	e.complete(r, m)
}

func testBatchSendKeepsOrder(t *testing.T, e *env) {
	q := e.queue(bus.QueueOptions{LockDuration: longLock})
	r := e.receiver(bus.QueueSource(q))
	batch := numbered("batch", 25)
	e.send(q, batch...)
	got := e.receiveN(r, len(batch), 10)
	slices.SortFunc(got, func(a, b *bus.Received) int { return int(a.SequenceNumber - b.SequenceNumber) })
	want := make([]string, len(batch))
	for i, m := range batch {
		want[i] = m.ID
	}
	if !slices.Equal(ids(got), want) {
		t.Fatalf("messages in sequence-number order: %v, want the send order %v", ids(got), want)
	}
	for i := 1; i < len(got); i++ {
		if got[i].SequenceNumber == got[i-1].SequenceNumber {
			t.Fatalf("sequence number %d given twice", got[i].SequenceNumber)
		}
	}
	e.complete(r, got...)
	e.empty(r, quiet)
}

// A send bigger than a transport's batch limit (256 KB on Service Bus
// Standard) may be split, but every message arrives once, in send order.
func testLargeSend(t *testing.T, e *env) {
	q := e.queue(bus.QueueOptions{LockDuration: longLock})
	r := e.receiver(bus.QueueSource(q))
	msgs := numbered("large", 12)
	for i := range msgs {
		msgs[i].Body = bytes.Repeat([]byte{byte('a' + i)}, 40<<10)
	}
	e.send(q, msgs...)
	got := e.receiveN(r, len(msgs), 10)
	slices.SortFunc(got, func(a, b *bus.Received) int { return int(a.SequenceNumber - b.SequenceNumber) })
	for i, m := range got {
		if m.ID != msgs[i].ID || !bytes.Equal(m.Body, msgs[i].Body) {
			t.Fatalf("message %d in sequence order: %s with %d bytes, want %s with %d", i, m.ID, len(m.Body), msgs[i].ID, len(msgs[i].Body))
		}
	}
	e.complete(r, got...)
	e.empty(r, quiet)
}

func testReceiveReturnsAtMostMax(t *testing.T, e *env) {
	q := e.queue(bus.QueueOptions{LockDuration: longLock})
	r := e.receiver(bus.QueueSource(q))
	e.send(q, numbered("max", 5)...)
	got := e.receiveN(r, 5, 3) // fails on a batch larger than 3
	if len(got) != 5 {
		t.Fatalf("received %d, want 5", len(got))
	}
	e.complete(r, got...)
}

func testTopicFanOut(t *testing.T, e *env) {
	topic := e.topic(bus.TopicOptions{})
	var srcs []bus.Source
	for _, sub := range []string{"alpha", "beta", "gamma"} {
		srcs = append(srcs, e.subscription(topic, sub, bus.SubscriptionOptions{LockDuration: longLock}))
	}
	batch := numbered("fan", 5)
	e.send(topic, batch...)
	for _, src := range srcs {
		r := e.receiver(src)
		got := e.receiveN(r, len(batch), 10)
		if want := ids(toReceived(batch)); !slices.Equal(sortedIDs(got), want) {
			t.Fatalf("%s received %v, want %v", src, sortedIDs(got), want)
		}
		e.complete(r, got...)
		e.empty(r, quiet)
	}
}

func testCorrelationFilters(t *testing.T, e *env) {
	topic := e.topic(bus.TopicOptions{})
	subs := map[string]map[string]string{
		"all":     nil,
		"created": {"kind": "created"},
		"other":   {"kind": "deleted"},
		"both":    {"kind": "created", "lane": "burst"},
	}
	e.send(topic, // subscriptions may be created before or after: only later sends count
		bus.Message{ID: "before-subscriptions", Properties: map[string]string{"kind": "created"}})
	for name, filter := range subs {
		e.subscription(topic, name, bus.SubscriptionOptions{LockDuration: longLock, Filter: filter})
	}
	e.send(topic,
		bus.Message{ID: "plain"},
		bus.Message{ID: "created-default", Properties: map[string]string{"kind": "created", "lane": "default"}},
		bus.Message{ID: "created-burst", Properties: map[string]string{"kind": "created", "lane": "burst", "x": "y"}},
		bus.Message{ID: "updated", Properties: map[string]string{"kind": "updated"}},
		bus.Message{ID: "case", Properties: map[string]string{"kind": "Created"}},
	)
	want := map[string][]string{
		"all":     {"case", "created-burst", "created-default", "plain", "updated"},
		"created": {"created-burst", "created-default"},
		"other":   nil,
		"both":    {"created-burst"},
	}
	for name, wantIDs := range want {
		r := e.receiver(bus.SubscriptionSource(topic, name))
		got := e.receiveN(r, len(wantIDs), 10)
		if !slices.Equal(sortedIDs(got), wantIDs) {
			t.Errorf("subscription %s received %v, want %v", name, sortedIDs(got), wantIDs)
		}
		e.complete(r, got...)
		e.empty(r, quiet)
	}
}

func testEnsureUpdatesOptions(t *testing.T, e *env) {
	q := e.queue(bus.QueueOptions{LockDuration: longLock})
	if err := e.b.EnsureQueue(e.ctx(), q, bus.QueueOptions{LockDuration: shortLock}); err != nil {
		t.Fatalf("ensure queue again: %v", err)
	}
	r := e.receiver(bus.QueueSource(q))
	e.send(q, bus.Message{ID: "m"})
	e.receive(r)
	// Redelivered within the deadline only if the shorter lock applies.
	if m := e.receive(r); m.DeliveryCount != 2 {
		t.Fatalf("DeliveryCount = %d, want 2", m.DeliveryCount)
	}

	topic := e.topic(bus.TopicOptions{})
	src := e.subscription(topic, "s", bus.SubscriptionOptions{Filter: map[string]string{"k": "a"}})
	e.subscription(topic, "s", bus.SubscriptionOptions{Filter: map[string]string{"k": "b"}})
	e.send(topic, bus.Message{ID: "a", Properties: map[string]string{"k": "a"}},
		bus.Message{ID: "b", Properties: map[string]string{"k": "b"}})
	sr := e.receiver(src)
	wantID(t, e.receive(sr), "b")
	e.empty(sr, quiet)
}

func testPeekLockHidesMessage(t *testing.T, e *env) {
	q := e.queue(bus.QueueOptions{LockDuration: longLock})
	r1, r2 := e.receiver(bus.QueueSource(q)), e.receiver(bus.QueueSource(q))
	e.send(q, bus.Message{ID: "m"})
	m := e.receive(r1)
	e.empty(r2, quiet)
	e.empty(r1, quiet)
	e.complete(r1, m)
}

func testLockExpiryRedelivers(t *testing.T, e *env) {
	q := e.queue(bus.QueueOptions{LockDuration: shortLock})
	r := e.receiver(bus.QueueSource(q))
	e.send(q, bus.Message{ID: "m"})
	first := e.receive(r)
	second := e.receive(r) // once the first lock expires
	wantID(t, second, "m")
	if second.DeliveryCount != 2 {
		t.Fatalf("DeliveryCount = %d, want 2", second.DeliveryCount)
	}
	if second.LockToken == first.LockToken {
		t.Fatal("the redelivery has the same lock token")
	}
	ctx := e.ctx()
	wantLockLost(t, "complete with the expired delivery", r.Complete(ctx, first))
	wantLockLost(t, "abandon with the expired delivery", r.Abandon(ctx, first))
	wantLockLost(t, "dead-letter with the expired delivery", r.DeadLetter(ctx, first, "r", "d"))
	_, err := r.RenewLock(ctx, first)
	wantLockLost(t, "renew with the expired delivery", err)
	e.complete(r, second)
	e.empty(r, quiet)
}

func testSettleAfterLockExpiryFails(t *testing.T, e *env) {
	q := e.queue(bus.QueueOptions{LockDuration: shortLock})
	r := e.receiver(bus.QueueSource(q))
	e.send(q, bus.Message{ID: "m"})
	m := e.receive(r)
	time.Sleep(time.Until(m.LockedUntil) + shortLock/2)
	wantLockLost(t, "complete after the lock expired", r.Complete(e.ctx(), m))
	if m := e.receive(r); m.DeliveryCount != 2 {
		t.Fatalf("DeliveryCount = %d, want 2", m.DeliveryCount)
	}
}

func testRenewLockKeepsMessage(t *testing.T, e *env) {
	const lock = time.Second
	q := e.queue(bus.QueueOptions{LockDuration: lock})
	holder, rival := e.receiver(bus.QueueSource(q)), e.receiver(bus.QueueSource(q))
	e.send(q, bus.Message{ID: "m"})
	m := e.receive(holder)

	watch := 3 * lock
	rivalDone := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(e.ctx(), watch)
		defer cancel()
		msgs, err := rival.Receive(ctx, 1)
		if len(msgs) > 0 {
			err = fmt.Errorf("rival received %q (delivery %d) while the lock was renewed", msgs[0].ID, msgs[0].DeliveryCount)
		} else if errors.Is(err, context.DeadlineExceeded) {
			err = nil
		}
		rivalDone <- err
	}()
	prev := m.LockedUntil
	for deadline := time.Now().Add(watch); time.Now().Before(deadline); {
		time.Sleep(lock / 4)
		until, err := holder.RenewLock(e.ctx(), m)
		if err != nil {
			t.Fatalf("renew lock: %v", err)
		}
		if !until.After(prev) {
			t.Fatalf("renewed lock until %v, not after the previous %v", until, prev)
		}
		if !m.LockedUntil.Equal(until) {
			t.Fatalf("LockedUntil = %v after renewal, want %v", m.LockedUntil, until)
		}
		prev = until
	}
	if err := <-rivalDone; err != nil {
		t.Fatal(err)
	}
	e.complete(holder, m)
}

func testAbandonRedeliversAtOnce(t *testing.T, e *env) {
	q := e.queue(bus.QueueOptions{LockDuration: longLock})
	r := e.receiver(bus.QueueSource(q))
	e.send(q, bus.Message{ID: "m"})
	e.abandon(r, e.receive(r))
	m := e.receive(r) // within the deadline, long before the lock would expire
	wantID(t, m, "m")
	if m.DeliveryCount != 2 {
		t.Fatalf("DeliveryCount = %d, want 2", m.DeliveryCount)
	}
	e.complete(r, m)
}

func testMaxDeliveryCountDeadLetters(t *testing.T, e *env) {
	const maxDeliveries = 3
	q := e.queue(bus.QueueOptions{LockDuration: longLock, MaxDeliveryCount: maxDeliveries})
	r := e.receiver(bus.QueueSource(q))
	dlq := e.receiver(bus.QueueSource(q).DeadLetterQueue())
	e.send(q, bus.Message{ID: "poison", Body: []byte("x"), Properties: map[string]string{"k": "v"}})
	for i := 1; i <= maxDeliveries; i++ {
		m := e.receive(r)
		if m.DeliveryCount != i {
			t.Fatalf("delivery %d has DeliveryCount %d", i, m.DeliveryCount)
		}
		e.abandon(r, m)
	}
	dead := e.receive(dlq)
	wantID(t, dead, "poison")
	if dead.DeadLetterReason != bus.ReasonMaxDeliveryCountExceeded {
		t.Fatalf("DeadLetterReason = %q, want %q", dead.DeadLetterReason, bus.ReasonMaxDeliveryCountExceeded)
	}
	if string(dead.Body) != "x" || dead.Properties["k"] != "v" {
		t.Fatalf("dead-lettered message lost its body or properties: %q %v", dead.Body, dead.Properties)
	}
	e.empty(r, quiet)
	e.complete(dlq, dead)
	e.empty(dlq, quiet)
}

func testMaxDeliveryCountAfterLockExpiry(t *testing.T, e *env) {
	q := e.queue(bus.QueueOptions{LockDuration: shortLock, MaxDeliveryCount: 1})
	r := e.receiver(bus.QueueSource(q))
	e.send(q, bus.Message{ID: "m"})
	m := e.receive(r)
	// Once the lock expires the message has used its only delivery.
	e.empty(r, time.Until(m.LockedUntil)+3*shortLock)
	dead := e.receive(e.receiver(bus.QueueSource(q).DeadLetterQueue()))
	wantID(t, dead, "m")
	if dead.DeadLetterReason != bus.ReasonMaxDeliveryCountExceeded {
		t.Fatalf("DeadLetterReason = %q, want %q", dead.DeadLetterReason, bus.ReasonMaxDeliveryCountExceeded)
	}
}

func testExplicitDeadLetter(t *testing.T, e *env) {
	q := e.queue(bus.QueueOptions{LockDuration: longLock})
	r := e.receiver(bus.QueueSource(q))
	dlq := e.receiver(bus.QueueSource(q).DeadLetterQueue())
	e.send(q, bus.Message{ID: "bad", Body: []byte("payload"), Subject: "s", Properties: map[string]string{"a": "b"}})
	m := e.receive(r)
	if err := r.DeadLetter(e.ctx(), m, "ValidationFailed", "field tenant_id is missing"); err != nil {
		t.Fatalf("dead-letter: %v", err)
	}
	dead := e.receive(dlq)
	wantID(t, dead, "bad")
	if dead.DeadLetterReason != "ValidationFailed" || dead.DeadLetterDescription != "field tenant_id is missing" {
		t.Fatalf("dead-letter reason %q description %q", dead.DeadLetterReason, dead.DeadLetterDescription)
	}
	// The reason travels in its fields, not as an extra property.
	if string(dead.Body) != "payload" || dead.Subject != "s" || !maps.Equal(dead.Properties, map[string]string{"a": "b"}) {
		t.Fatalf("dead-lettered message changed: body %q subject %q properties %v", dead.Body, dead.Subject, dead.Properties)
	}
	e.empty(r, quiet)
	e.complete(dlq, dead)
	e.empty(dlq, quiet)
}

func testSubscriptionDeadLetter(t *testing.T, e *env) {
	topic := e.topic(bus.TopicOptions{})
	a := e.subscription(topic, "a", bus.SubscriptionOptions{LockDuration: longLock, MaxDeliveryCount: 1})
	b := e.subscription(topic, "b", bus.SubscriptionOptions{LockDuration: longLock})
	e.send(topic, bus.Message{ID: "m"})
	ra := e.receiver(a)
	e.abandon(ra, e.receive(ra))
	dead := e.receive(e.receiver(a.DeadLetterQueue()))
	if dead.DeadLetterReason != bus.ReasonMaxDeliveryCountExceeded {
		t.Fatalf("DeadLetterReason = %q, want %q", dead.DeadLetterReason, bus.ReasonMaxDeliveryCountExceeded)
	}
	// The other subscription's copy is untouched.
	rb := e.receiver(b)
	m := e.receive(rb)
	if m.DeliveryCount != 1 {
		t.Fatalf("subscription b: DeliveryCount = %d, want 1", m.DeliveryCount)
	}
	if err := rb.DeadLetter(e.ctx(), m, "r", "d"); err != nil {
		t.Fatalf("dead-letter: %v", err)
	}
	if dead := e.receive(e.receiver(b.DeadLetterQueue())); dead.DeadLetterReason != "r" || dead.DeadLetterDescription != "d" {
		t.Fatalf("subscription b DLQ: reason %q description %q", dead.DeadLetterReason, dead.DeadLetterDescription)
	}
}

func testTTLExpiryDeadLetters(t *testing.T, e *env) {
	const ttl = 300 * time.Millisecond
	byMessage := e.queue(bus.QueueOptions{DeadLetterOnExpiration: true})
	byEntity := e.queue(bus.QueueOptions{DeadLetterOnExpiration: true, DefaultTTL: ttl})
	e.send(byMessage, bus.Message{ID: "short", TTL: ttl}, bus.Message{ID: "long", TTL: time.Hour})
	e.send(byEntity, bus.Message{ID: "default"})
	time.Sleep(2 * ttl)
	for q, expired := range map[string]string{byMessage: "short", byEntity: "default"} {
		// Expired messages move when a receiver pulls from the entity, as in Service Bus.
		r := e.receiver(bus.QueueSource(q))
		if q == byMessage {
			m := e.receive(r)
			wantID(t, m, "long")
			e.complete(r, m)
		}
		e.empty(r, quiet)
		dead := e.receive(e.receiver(bus.QueueSource(q).DeadLetterQueue()))
		wantID(t, dead, expired)
		if dead.DeadLetterReason != bus.ReasonTTLExpired {
			t.Fatalf("DeadLetterReason = %q, want %q", dead.DeadLetterReason, bus.ReasonTTLExpired)
		}
	}
}

func testTTLExpiryDrops(t *testing.T, e *env) {
	const ttl = 300 * time.Millisecond
	q := e.queue(bus.QueueOptions{})
	e.send(q, bus.Message{ID: "short", TTL: ttl})
	time.Sleep(2 * ttl)
	e.empty(e.receiver(bus.QueueSource(q)), quiet)
	e.empty(e.receiver(bus.QueueSource(q).DeadLetterQueue()), quiet)
}

func testScheduledEnqueue(t *testing.T, e *env) {
	q := e.queue(bus.QueueOptions{})
	r := e.receiver(bus.QueueSource(q))
	at := time.Now().Add(time.Second)
	e.send(q, bus.Message{ID: "later", ScheduledAt: at}, bus.Message{ID: "now"})
	m := e.receive(r)
	wantID(t, m, "now")
	e.complete(r, m)
	m = e.receive(r)
	wantID(t, m, "later")
	if now := time.Now(); now.Before(at.Add(-skew)) {
		t.Fatalf("scheduled message delivered at %v, before its time %v", now, at)
	}
	e.complete(r, m)
	e.empty(r, quiet)
}

func testDuplicateDetection(t *testing.T, e *env) {
	const window = time.Second
	q := e.queue(bus.QueueOptions{DuplicateDetectionWindow: window, LockDuration: longLock})
	other := e.queue(bus.QueueOptions{DuplicateDetectionWindow: window})
	s := e.sender(q)
	start := time.Now()
	for _, batch := range [][]bus.Message{
		{{ID: "a", Body: []byte("first")}},
		{{ID: "a", Body: []byte("second")}},
		{{ID: "b", Body: []byte("first")}, {ID: "b", Body: []byte("second")}, {ID: "c"}},
		{{ID: "c"}, {ID: "a"}},
	} {
		if err := s.Send(e.ctx(), batch...); err != nil {
			t.Fatalf("send: %v", err)
		}
	}
	r := e.receiver(bus.QueueSource(q))
	got := e.receiveN(r, 3, 10)
	if want := []string{"a", "b", "c"}; !slices.Equal(sortedIDs(got), want) {
		t.Fatalf("received %v, want %v", sortedIDs(got), want)
	}
	for _, m := range got {
		if m.ID != "c" && string(m.Body) != "first" {
			t.Fatalf("%s: received body %q, want the first send's", m.ID, m.Body)
		}
	}
	e.complete(r, got...)
	e.empty(r, quiet)

	// The same id on another entity is not a duplicate.
	e.send(other, bus.Message{ID: "a"})
	wantID(t, e.receive(e.receiver(bus.QueueSource(other))), "a")

	// Nor is it after the window.
	time.Sleep(time.Until(start.Add(window + window/2)))
	if err := s.Send(e.ctx(), bus.Message{ID: "a", Body: []byte("third")}); err != nil {
		t.Fatalf("send: %v", err)
	}
	m := e.receive(r)
	if m.ID != "a" || string(m.Body) != "third" {
		t.Fatalf("after the window received %q %q, want a third", m.ID, m.Body)
	}
}

func testDuplicateDetectionOnTopic(t *testing.T, e *env) {
	topic := e.topic(bus.TopicOptions{DuplicateDetectionWindow: time.Minute})
	src := e.subscription(topic, "s", bus.SubscriptionOptions{LockDuration: longLock})
	e.send(topic, bus.Message{ID: "x"}, bus.Message{ID: "x"})
	e.send(topic, bus.Message{ID: "x"})
	r := e.receiver(src)
	e.complete(r, e.receive(r))
	e.empty(r, quiet)
}

func testCompetingConsumers(t *testing.T, e *env) {
	const (
		total     = 200
		consumers = 4
	)
	q := e.queue(bus.QueueOptions{LockDuration: longLock})
	ctx, cancel := context.WithTimeout(e.ctx(), eventually)
	defer cancel()

	var (
		mu        sync.Mutex
		delivered = make(map[string]int)
		completed int
		wg        sync.WaitGroup
		errs      = make(chan error, consumers)
	)
	for i := range consumers {
		r := e.receiver(bus.QueueSource(q))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				msgs, err := r.Receive(ctx, 10)
				if err != nil {
					if ctx.Err() == nil {
						errs <- fmt.Errorf("consumer %d: receive: %w", i, err)
					}
					return
				}
				for _, m := range msgs {
					mu.Lock()
					delivered[m.ID]++
					mu.Unlock()
					if err := r.Complete(ctx, m); err != nil {
						errs <- fmt.Errorf("consumer %d: complete %s: %w", i, m.ID, err)
						return
					}
					mu.Lock()
					if completed++; completed == total {
						cancel()
					}
					mu.Unlock()
				}
			}
		}()
	}
	msgs := numbered("cc", total)
	s := e.sender(q)
	for i := 0; i < total; i += 50 {
		if err := s.Send(ctx, msgs[i:i+50]...); err != nil {
			t.Fatalf("send: %v", err)
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if completed != total {
		t.Fatalf("completed %d of %d messages before the deadline", completed, total)
	}
	for _, m := range msgs {
		if n := delivered[m.ID]; n != 1 {
			t.Errorf("%s delivered %d times", m.ID, n)
		}
	}
	e.empty(e.receiver(bus.QueueSource(q)), quiet)
}

// receiveAsync starts a Receive that blocks on an empty source.
func (e *env) receiveAsync(r bus.Receiver) <-chan []*bus.Received {
	got := make(chan []*bus.Received, 1)
	errs := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(e.ctx(), eventually)
		defer cancel()
		msgs, err := r.Receive(ctx, 10)
		if err != nil {
			errs <- err
		}
		got <- msgs
	}()
	e.t.Cleanup(func() {
		select {
		case err := <-errs:
			e.t.Errorf("blocked receive: %v", err)
		default:
		}
	})
	return got
}

func testReceiveWakesOnSend(t *testing.T, e *env) {
	q := e.queue(bus.QueueOptions{})
	r := e.receiver(bus.QueueSource(q))
	got := e.receiveAsync(r)
	time.Sleep(quiet) // let it block
	e.send(q, bus.Message{ID: "wake"})
	msgs := <-got
	if len(msgs) != 1 || msgs[0].ID != "wake" {
		t.Fatalf("blocked receive returned %v", ids(msgs))
	}
	e.complete(r, msgs...)
}

func testReceiveWakesOnTopicSend(t *testing.T, e *env) {
	topic := e.topic(bus.TopicOptions{})
	r := e.receiver(e.subscription(topic, "s", bus.SubscriptionOptions{}))
	got := e.receiveAsync(r)
	time.Sleep(quiet)
	e.send(topic, bus.Message{ID: "wake"})
	msgs := <-got
	if len(msgs) != 1 || msgs[0].ID != "wake" {
		t.Fatalf("blocked receive returned %v", ids(msgs))
	}
}

func testReceiveReturnsContextError(t *testing.T, e *env) {
	q := e.queue(bus.QueueOptions{})
	r := e.receiver(bus.QueueSource(q))
	e.empty(r, quiet) // deadline

	ctx, cancel := context.WithCancel(e.ctx())
	go func() { time.Sleep(quiet); cancel() }()
	msgs, err := r.Receive(ctx, 1)
	if len(msgs) != 0 || !errors.Is(err, context.Canceled) {
		t.Fatalf("receive with a cancelled context: %d messages, %v; want context.Canceled", len(msgs), err)
	}
	if _, err := r.Receive(ctx, 1); !errors.Is(err, context.Canceled) {
		t.Fatalf("receive with a context cancelled before: %v; want context.Canceled", err)
	}
}

func testUnknownEntityNotFound(t *testing.T, e *env) {
	ctx := e.ctx()
	topic := e.topic(bus.TopicOptions{})
	missing := e.name("missing")
	send := func(entity string) error {
		s, err := e.b.NewSender(ctx, entity)
		if err != nil {
			return err
		}
		defer s.Close(ctx) //nolint:errcheck
		return s.Send(ctx, bus.Message{ID: "m"})
	}
	receive := func(src bus.Source) error {
		r, err := e.b.NewReceiver(ctx, src)
		if err != nil {
			return err
		}
		defer r.Close(ctx) //nolint:errcheck
		ctx, cancel := context.WithTimeout(ctx, quiet)
		defer cancel()
		_, err = r.Receive(ctx, 1)
		return err
	}
	for what, err := range map[string]error{
		"send to a missing entity":                 send(missing),
		"receive from a missing queue":             receive(bus.QueueSource(missing)),
		"receive from a missing DLQ":               receive(bus.QueueSource(missing).DeadLetterQueue()),
		"receive from a missing topic":             receive(bus.SubscriptionSource(missing, "s")),
		"receive from a missing subscription":      receive(bus.SubscriptionSource(topic, "missing")),
		"ensure a subscription of a missing topic": e.b.EnsureSubscription(ctx, missing, "s", bus.SubscriptionOptions{}),
	} {
		if !errors.Is(err, bus.ErrNotFound) {
			t.Errorf("%s: got %v, want an error wrapping bus.ErrNotFound", what, err)
		}
	}
}

func testSettleTwiceLosesLock(t *testing.T, e *env) {
	q := e.queue(bus.QueueOptions{LockDuration: longLock})
	r := e.receiver(bus.QueueSource(q))
	ctx := e.ctx()
	e.send(q, bus.Message{ID: "completed"}, bus.Message{ID: "abandoned"})
	got := e.receiveN(r, 2, 2)
	slices.SortFunc(got, func(a, b *bus.Received) int { return strings.Compare(b.ID, a.ID) })
	completed, abandoned := got[0], got[1]

	e.complete(r, completed)
	wantLockLost(t, "complete twice", r.Complete(ctx, completed))
	wantLockLost(t, "abandon after complete", r.Abandon(ctx, completed))
	wantLockLost(t, "dead-letter after complete", r.DeadLetter(ctx, completed, "r", "d"))
	_, err := r.RenewLock(ctx, completed)
	wantLockLost(t, "renew after complete", err)

	e.abandon(r, abandoned)
	wantLockLost(t, "abandon twice", r.Abandon(ctx, abandoned))
	wantLockLost(t, "complete after abandon", r.Complete(ctx, abandoned))
	again := e.receive(r)
	wantID(t, again, "abandoned")
	e.complete(r, again)
}

func testCloseSenderAndReceiver(t *testing.T, e *env) {
	q := e.queue(bus.QueueOptions{LockDuration: longLock})
	ctx := e.ctx()
	s := e.sender(q)
	if err := s.Close(ctx); err != nil {
		t.Fatalf("close sender: %v", err)
	}
	if err := s.Send(ctx, bus.Message{ID: "m"}); !errors.Is(err, bus.ErrClosed) {
		t.Fatalf("send on a closed sender: got %v, want bus.ErrClosed", err)
	}

	e.send(q, bus.Message{ID: "m"})
	r := e.receiver(bus.QueueSource(q))
	m := e.receive(r)
	if err := r.Close(ctx); err != nil {
		t.Fatalf("close receiver: %v", err)
	}
	if _, err := r.Receive(ctx, 1); !errors.Is(err, bus.ErrClosed) {
		t.Fatalf("receive on a closed receiver: got %v, want bus.ErrClosed", err)
	}
	if err := r.Complete(ctx, m); !errors.Is(err, bus.ErrClosed) {
		t.Fatalf("complete on a closed receiver: got %v, want bus.ErrClosed", err)
	}
}

func testCloseBus(t *testing.T, e *env) {
	ctx := e.ctx()
	q := e.queue(bus.QueueOptions{})
	s := e.sender(q)
	r := e.receiver(bus.QueueSource(q))
	blocked := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(ctx, eventually)
		defer cancel()
		_, err := r.Receive(ctx, 1)
		blocked <- err
	}()
	time.Sleep(quiet)
	if err := e.b.Close(ctx); err != nil {
		t.Fatalf("close bus: %v", err)
	}
	if err := <-blocked; !errors.Is(err, bus.ErrClosed) {
		t.Errorf("receive blocked while the bus closed: got %v, want bus.ErrClosed", err)
	}
	if err := s.Send(ctx, bus.Message{ID: "m"}); !errors.Is(err, bus.ErrClosed) {
		t.Errorf("send after close: got %v, want bus.ErrClosed", err)
	}
	if _, err := r.Receive(ctx, 1); !errors.Is(err, bus.ErrClosed) {
		t.Errorf("receive after close: got %v, want bus.ErrClosed", err)
	}
	if _, err := e.b.NewSender(ctx, q); !errors.Is(err, bus.ErrClosed) {
		t.Errorf("new sender after close: got %v, want bus.ErrClosed", err)
	}
	if _, err := e.b.NewReceiver(ctx, bus.QueueSource(q)); !errors.Is(err, bus.ErrClosed) {
		t.Errorf("new receiver after close: got %v, want bus.ErrClosed", err)
	}
	if err := e.b.EnsureQueue(ctx, q, bus.QueueOptions{}); !errors.Is(err, bus.ErrClosed) {
		t.Errorf("ensure queue after close: got %v, want bus.ErrClosed", err)
	}
}

// Every process declares the topology it uses at start, so many declare the
// same entities at once; all of them must succeed.
func testConcurrentEnsure(t *testing.T, e *env) {
	queue, topic := e.name("q"), e.name("t")
	const declarers, subscriptions = 8, 16
	start := make(chan struct{})
	errs := make(chan error, declarers)
	for range declarers {
		go func() {
			<-start // all at once, as processes starting together do
			err := e.b.EnsureQueue(e.ctx(), queue, bus.QueueOptions{})
			if err == nil {
				err = e.b.EnsureTopic(e.ctx(), topic, bus.TopicOptions{})
			}
			for i := 0; err == nil && i < subscriptions; i++ {
				err = e.b.EnsureSubscription(e.ctx(), topic, fmt.Sprintf("sub-%d", i), bus.SubscriptionOptions{Filter: map[string]string{"n": fmt.Sprint(i)}})
			}
			errs <- err
		}()
	}
	close(start)
	for range declarers {
		if err := <-errs; err != nil {
			t.Fatalf("concurrent declaration: %v", err)
		}
	}
	src := e.subscription(topic, "sub-2", bus.SubscriptionOptions{Filter: map[string]string{"n": "2"}})
	e.send(topic, bus.Message{ID: "m", Body: []byte("x"), Properties: map[string]string{"n": "2"}})
	if got := e.receiveN(e.receiver(src), 1, 1); string(got[0].Body) != "x" {
		t.Fatalf("got %q", got[0].Body)
	}
}
