package sbtest_test

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"
	"github.com/Azure/go-amqp"

	"github.com/lucius-platform/lucius/base/sbtest"
)

// redirect sends the admin client's https requests to the broker's http port.
type redirect struct{ base *url.URL }

func (r redirect) Do(req *http.Request) (*http.Response, error) {
	req.URL.Scheme, req.URL.Host = r.base.Scheme, r.base.Host
	return http.DefaultClient.Do(req)
}

// The real azservicebus client provisions a queue, sends, receives with
// peek-lock, renews the lock and completes on the broker.
func TestBrokerServesTheSDK(t *testing.T) {
	b := sbtest.Start(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	base, _ := url.Parse(b.AdminURL)
	ac, err := admin.NewClientFromConnectionString(b.ConnectionString, &admin.ClientOptions{ClientOptions: azcore.ClientOptions{Transport: redirect{base}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ac.CreateQueue(ctx, "q", &admin.CreateQueueOptions{Properties: &admin.QueueProperties{LockDuration: to.Ptr("PT10S")}}); err != nil {
		t.Fatalf("create queue: %v", err)
	}
	c, err := azservicebus.NewClientFromConnectionString(b.ConnectionString, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	s, err := c.NewSender("q", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SendMessage(ctx, &azservicebus.Message{MessageID: to.Ptr("m1"), Body: []byte("hello"), ApplicationProperties: map[string]any{"k": "v"}}, nil); err != nil {
		t.Fatalf("send: %v\n%s", err, b.Output())
	}
	r, err := c.NewReceiverForQueue("q", nil)
	if err != nil {
		t.Fatal(err)
	}
	msgs, err := r.ReceiveMessages(ctx, 1, nil)
	if err != nil || len(msgs) != 1 {
		t.Fatalf("receive: %d messages, %v\n%s", len(msgs), err, b.Output())
	}
	m := msgs[0]
	if string(m.Body) != "hello" || m.MessageID != "m1" || m.DeliveryCount != 1 || m.SequenceNumber == nil || m.LockedUntil == nil || m.ApplicationProperties["k"] != "v" {
		t.Fatalf("received %+v", m)
	}
	if err := r.RenewMessageLock(ctx, m, nil); err != nil {
		t.Fatalf("renew: %v", err)
	}
	if err := r.CompleteMessage(ctx, m, nil); err != nil {
		t.Fatalf("complete: %v", err)
	}
	if err := r.CompleteMessage(ctx, &azservicebus.ReceivedMessage{LockToken: m.LockToken}, nil); err == nil {
		t.Fatal("complete of a removed message succeeded")
	}
	var sbErr *azservicebus.Error
	_, err = c.NewSender("missing", nil)
	if err == nil {
		s2, _ := c.NewSender("missing", nil)
		err = s2.SendMessage(ctx, &azservicebus.Message{Body: []byte("x")}, nil)
	}
	var amqpErr *amqp.Error
	if !(errors.As(err, &sbErr) && sbErr.Code == azservicebus.CodeNotFound) && !(errors.As(err, &amqpErr) && amqpErr.Condition == amqp.ErrCondNotFound) {
		t.Fatalf("send to a missing queue: %v\n%s", err, b.Output())
	}
}

// The $management operations beyond renew-lock: schedule, cancel-scheduled
// and peek; and dead-lettering to the DLQ sub-queue.
func TestBrokerManagementOperations(t *testing.T) {
	b := sbtest.Start(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	base, _ := url.Parse(b.AdminURL)
	ac, err := admin.NewClientFromConnectionString(b.ConnectionString, &admin.ClientOptions{ClientOptions: azcore.ClientOptions{Transport: redirect{base}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ac.CreateQueue(ctx, "q", nil); err != nil {
		t.Fatalf("create queue: %v", err)
	}
	if got, err := ac.GetQueue(ctx, "q", nil); err != nil || got == nil {
		t.Fatalf("get queue: %v %v", got, err)
	}
	c, err := azservicebus.NewClientFromConnectionString(b.ConnectionString, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	s, _ := c.NewSender("q", nil)
	seqs, err := s.ScheduleMessages(ctx, []*azservicebus.Message{
		{MessageID: to.Ptr("kept"), Body: []byte("a")},
		{MessageID: to.Ptr("cancelled"), Body: []byte("b")},
	}, time.Now().Add(time.Hour), nil)
	if err != nil || len(seqs) != 2 {
		t.Fatalf("schedule: %v %v\n%s", seqs, err, b.Output())
	}
	if err := s.CancelScheduledMessages(ctx, seqs[1:], nil); err != nil {
		t.Fatalf("cancel scheduled: %v", err)
	}
	r, _ := c.NewReceiverForQueue("q", nil)
	peeked, err := r.PeekMessages(ctx, 10, nil)
	if err != nil || len(peeked) != 1 || peeked[0].MessageID != "kept" || peeked[0].ScheduledEnqueueTime == nil {
		t.Fatalf("peek: %d messages, %v", len(peeked), err)
	}

	if err := s.SendMessage(ctx, &azservicebus.Message{MessageID: to.Ptr("bad"), Body: []byte("x")}, nil); err != nil {
		t.Fatal(err)
	}
	msgs, err := r.ReceiveMessages(ctx, 1, nil)
	if err != nil || len(msgs) != 1 {
		t.Fatalf("receive: %v %v", msgs, err)
	}
	if err := r.AbandonMessage(ctx, msgs[0], nil); err != nil {
		t.Fatalf("abandon: %v", err)
	}
	if msgs, err = r.ReceiveMessages(ctx, 1, nil); err != nil || len(msgs) != 1 || msgs[0].DeliveryCount != 2 {
		t.Fatalf("receive after abandon: %v %v", msgs, err)
	}
	if err := r.DeadLetterMessage(ctx, msgs[0], &azservicebus.DeadLetterOptions{Reason: to.Ptr("r"), ErrorDescription: to.Ptr("d")}); err != nil {
		t.Fatalf("dead-letter: %v", err)
	}
	dlq, _ := c.NewReceiverForQueue("q", &azservicebus.ReceiverOptions{SubQueue: azservicebus.SubQueueDeadLetter})
	dead, err := dlq.ReceiveMessages(ctx, 1, nil)
	if err != nil || len(dead) != 1 || *dead[0].DeadLetterReason != "r" || *dead[0].DeadLetterErrorDescription != "d" || *dead[0].DeadLetterSource != "q" {
		t.Fatalf("dead-letter queue: %v %v", dead, err)
	}
}

// The GET of a queue, topic or subscription carries its runtime properties,
// counted as Service Bus counts them: a message scheduled to a topic counts
// on the topic, not on its subscriptions. Peeks tell scheduled messages from
// active ones.
func TestBrokerReportsRuntimeProperties(t *testing.T) {
	b := sbtest.Start(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	base, _ := url.Parse(b.AdminURL)
	ac, err := admin.NewClientFromConnectionString(b.ConnectionString, &admin.ClientOptions{ClientOptions: azcore.ClientOptions{Transport: redirect{base}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ac.CreateQueue(ctx, "q", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ac.CreateTopic(ctx, "t", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ac.CreateSubscription(ctx, "t", "s", nil); err != nil {
		t.Fatal(err)
	}
	c, err := azservicebus.NewClientFromConnectionString(b.ConnectionString, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	later := time.Now().Add(time.Hour)
	for _, entity := range []string{"q", "t"} {
		s, _ := c.NewSender(entity, nil)
		for _, m := range []*azservicebus.Message{
			{MessageID: to.Ptr("now"), Body: []byte("a")},
			{MessageID: to.Ptr("dead"), Body: []byte("b")},
			{MessageID: to.Ptr("later"), Body: []byte("c"), ScheduledEnqueueTime: &later},
		} {
			if err := s.SendMessage(ctx, m, nil); err != nil {
				t.Fatalf("send to %s: %v", entity, err)
			}
		}
	}
	qr, err := c.NewReceiverForQueue("q", nil)
	if err != nil {
		t.Fatal(err)
	}
	sr, err := c.NewReceiverForSubscription("t", "s", nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []*azservicebus.Receiver{qr, sr} {
		msgs, err := r.ReceiveMessages(ctx, 1, nil)
		if err != nil || len(msgs) != 1 {
			t.Fatalf("receive: %v %v", msgs, err)
		}
		if err := r.DeadLetterMessage(ctx, msgs[0], nil); err != nil {
			t.Fatalf("dead-letter: %v", err)
		}
	}

	q, err := ac.GetQueueRuntimeProperties(ctx, "q", nil)
	if err != nil || q == nil {
		t.Fatalf("queue runtime properties: %v %v", q, err)
	}
	if q.ActiveMessageCount != 1 || q.ScheduledMessageCount != 1 || q.DeadLetterMessageCount != 1 || q.TotalMessageCount != 3 {
		t.Errorf("queue runtime properties %+v, want 1 active, 1 scheduled, 1 dead-lettered, 3 in all", q.QueueRuntimeProperties)
	}
	sub, err := ac.GetSubscriptionRuntimeProperties(ctx, "t", "s", nil)
	if err != nil || sub == nil {
		t.Fatalf("subscription runtime properties: %v %v", sub, err)
	}
	if sub.ActiveMessageCount != 1 || sub.DeadLetterMessageCount != 1 {
		t.Errorf("subscription runtime properties %+v, want 1 active, 1 dead-lettered", sub.SubscriptionRuntimeProperties)
	}
	topic, err := ac.GetTopicRuntimeProperties(ctx, "t", nil)
	if err != nil || topic == nil || topic.ScheduledMessageCount != 1 {
		t.Errorf("topic runtime properties %+v, %v; want 1 scheduled", topic, err)
	}
	if missing, err := ac.GetQueueRuntimeProperties(ctx, "absent", nil); missing != nil || err != nil {
		t.Errorf("runtime properties of a missing queue: %v, %v; want nil, nil (the SDK's not found)", missing, err)
	}

	peeked, err := qr.PeekMessages(ctx, 10, &azservicebus.PeekMessagesOptions{FromSequenceNumber: to.Ptr[int64](1)})
	if err != nil || len(peeked) != 2 {
		t.Fatalf("peek: %d messages, %v", len(peeked), err)
	}
	for _, m := range peeked {
		want := azservicebus.MessageStateActive
		if m.MessageID == "later" {
			want = azservicebus.MessageStateScheduled
		}
		if m.State != want {
			t.Errorf("peeked %s in state %v, want %v", m.MessageID, m.State, want)
		}
	}
}

// Filters the broker cannot evaluate are refused rather than matched wrongly.
func TestBrokerRefusesSQLFilters(t *testing.T) {
	b := sbtest.Start(t)
	ctx := t.Context()
	base, _ := url.Parse(b.AdminURL)
	ac, err := admin.NewClientFromConnectionString(b.ConnectionString, &admin.ClientOptions{ClientOptions: azcore.ClientOptions{Transport: redirect{base}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ac.CreateTopic(ctx, "t", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ac.CreateSubscription(ctx, "t", "s", nil); err != nil {
		t.Fatal(err)
	}
	_, err = ac.CreateRule(ctx, "t", "s", &admin.CreateRuleOptions{Name: to.Ptr("sql"), Filter: &admin.SQLFilter{Expression: "kind = 'a'"}})
	var respErr *azcore.ResponseError
	if !errors.As(err, &respErr) || respErr.StatusCode != http.StatusBadRequest {
		t.Fatalf("create a SQL rule: %v, want status 400", err)
	}
	if _, err := ac.CreateRule(ctx, "t", "s", &admin.CreateRuleOptions{Name: to.Ptr("none"), Filter: &admin.FalseFilter{}}); err != nil {
		t.Fatalf("create a FalseFilter rule: %v", err)
	}
}
