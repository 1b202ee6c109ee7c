package sbbus

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/lucius-platform/lucius/bus"
	"github.com/lucius-platform/lucius/bus/bustel"
)

// DefaultDepthInterval is Config.DepthInterval's default.
const DefaultDepthInterval = 10 * time.Second

// Bounds of a depth reading: entities read at once, and the messages peeked
// for an entity's oldest active message (pages of peekPage, at most
// peekPages of them).
const (
	depthParallel = 4
	peekPage      = 10
	peekPages     = 3
)

// depthReader reads the depth gauges of the entities the Bus knows (see the
// package doc on metrics): runtime properties from the management API, and
// a peek for the oldest message's age. A reading is reused for interval;
// concurrent collections share one.
type depthReader struct {
	b        *Bus
	interval time.Duration

	entMu    sync.Mutex // guards entities; never held while reading
	entities map[string]entity

	peekMu  sync.Mutex                        // guards peekers
	peekers map[string]*azservicebus.Receiver // by path, dead-letter queues included

	mu   sync.Mutex // held for a whole reading, and guards what follows
	off  bool       // the management API refused to read
	at   time.Time
	last []bustel.Depth
}

// entity is a queue (queue set), a topic (topic set) or a subscription (both
// set) the Bus has declared or received from.
type entity struct{ queue, topic, sub string }

func (e entity) path() string {
	switch {
	case e.queue != "":
		return e.queue
	case e.sub != "":
		return e.topic + "/subscriptions/" + e.sub
	default:
		return e.topic
	}
}

func newDepthReader(b *Bus, interval time.Duration) *depthReader {
	return &depthReader{b: b, interval: interval, entities: map[string]entity{}, peekers: map[string]*azservicebus.Receiver{}}
}

// track adds the entity src reads from (a queue, or a subscription and its
// topic), or the topic when src names only a topic.
func (d *depthReader) track(src bus.Source) {
	var es []entity
	switch {
	case src.Queue != "":
		es = append(es, entity{queue: src.Queue})
	case src.Subscription != "":
		es = append(es, entity{topic: src.Topic}, entity{topic: src.Topic, sub: src.Subscription})
	case src.Topic != "":
		es = append(es, entity{topic: src.Topic})
	}
	d.entMu.Lock()
	defer d.entMu.Unlock()
	for _, e := range es {
		d.entities[e.path()] = e
	}
}

// read returns the last reading if it is recent, else reads again.
func (d *depthReader) read(ctx context.Context) ([]bustel.Depth, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.off || d.b.isClosed() {
		return nil, nil
	}
	if !d.at.IsZero() && time.Since(d.at) < d.interval {
		return d.last, nil
	}
	d.entMu.Lock()
	entities := make([]entity, 0, len(d.entities))
	for _, e := range d.entities {
		entities = append(entities, e)
	}
	d.entMu.Unlock()
	results := make([][]bustel.Depth, len(entities))
	errs := make([]error, len(entities))
	sem := make(chan struct{}, depthParallel)
	var wg sync.WaitGroup
	for i, e := range entities {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			results[i], errs[i] = d.readEntity(ctx, e)
		})
	}
	wg.Wait()
	var out []bustel.Depth
	var failed []error
	for i, e := range entities {
		switch code := statusCode(errs[i]); {
		case errors.Is(errs[i], bus.ErrNotFound):
			d.entMu.Lock()
			delete(d.entities, e.path()) // deleted since: a new declaration tracks it again
			d.entMu.Unlock()
		case code == http.StatusUnauthorized || code == http.StatusForbidden:
			d.off = true
			d.b.log.WarnContext(ctx, "sbbus: the management API refuses to read runtime properties (the Manage right is needed); "+
				"the queue depth metrics are off", "entity", e.path(), "err", errs[i])
			return nil, nil
		case errs[i] != nil:
			failed = append(failed, errs[i])
		}
		out = append(out, results[i]...)
	}
	d.at, d.last = time.Now(), out
	return out, errors.Join(failed...)
}

// readEntity reads one entity's runtime properties, and peeks it and its
// dead-letter queue when they hold messages. A topic holds only the
// messages scheduled to it (they reach its subscriptions at their time).
func (d *depthReader) readEntity(ctx context.Context, e entity) ([]bustel.Depth, error) {
	var active, scheduled, dead int64
	switch {
	case e.queue != "":
		p, err := d.b.admin.GetQueueRuntimeProperties(ctx, e.queue, nil)
		if err != nil || p == nil {
			return nil, notFound("queue runtime properties "+e.queue, p == nil, err)
		}
		active, scheduled, dead = int64(p.ActiveMessageCount), int64(p.ScheduledMessageCount), int64(p.DeadLetterMessageCount)
	case e.sub != "":
		p, err := d.b.admin.GetSubscriptionRuntimeProperties(ctx, e.topic, e.sub, nil)
		if err != nil || p == nil {
			return nil, notFound("subscription runtime properties "+e.path(), p == nil, err)
		}
		active, dead = int64(p.ActiveMessageCount), int64(p.DeadLetterMessageCount)
	default:
		p, err := d.b.admin.GetTopicRuntimeProperties(ctx, e.topic, nil)
		if err != nil || p == nil {
			return nil, notFound("topic runtime properties "+e.topic, p == nil, err)
		}
		return []bustel.Depth{{Entity: e.topic, Scheduled: int64(p.ScheduledMessageCount)}}, nil
	}
	src := bus.Source{Queue: e.queue, Topic: e.topic, Subscription: e.sub}
	main := bustel.Depth{Entity: src.Path(), Active: active, Scheduled: scheduled}
	dlq := bustel.Depth{Entity: src.DeadLetterQueue().Path(), Active: dead}
	var errs []error
	if active > 0 {
		var err error
		main.OldestAge, err = d.oldestAge(ctx, src)
		errs = append(errs, err)
	}
	if dead > 0 {
		var err error
		dlq.OldestAge, err = d.oldestAge(ctx, src.DeadLetterQueue())
		errs = append(errs, err)
	}
	return []bustel.Depth{main, dlq}, errors.Join(errs...)
}

// notFound is the error of a runtime-properties read: bus.ErrNotFound when
// the admin client found nothing (it answers a 404 with no error).
func notFound(what string, missing bool, err error) error {
	if err == nil && missing {
		return fmt.Errorf("sbbus: %s: %w", what, bus.ErrNotFound)
	}
	return mapErr(what, err)
}

// oldestAge peeks src for its oldest active message's age. A peek returns
// messages in sequence order, scheduled ones too (their sequence number is
// given when they are scheduled), so it reads up to peekPages pages; when
// they hold only scheduled messages the age is unknown (-1). An empty peek
// (the messages went meanwhile) is age 0.
func (d *depthReader) oldestAge(ctx context.Context, src bus.Source) (time.Duration, error) {
	path := src.Path()
	r, err := d.peeker(src)
	if err != nil {
		return -1, err
	}
	from := int64(1) // where the SDK's own first peek starts
	for range peekPages {
		msgs, err := r.PeekMessages(ctx, peekPage, &azservicebus.PeekMessagesOptions{FromSequenceNumber: &from})
		if err != nil {
			d.dropPeeker(path)
			return -1, mapErr("peek "+path, err)
		}
		if len(msgs) == 0 && from == 1 {
			return 0, nil
		}
		var oldest time.Time
		for _, m := range msgs {
			if m.State == azservicebus.MessageStateActive && m.EnqueuedTime != nil && (oldest.IsZero() || m.EnqueuedTime.Before(oldest)) {
				oldest = *m.EnqueuedTime
			}
		}
		if !oldest.IsZero() {
			return max(time.Since(oldest), 0), nil
		}
		if len(msgs) < peekPage || msgs[len(msgs)-1].SequenceNumber == nil {
			break
		}
		from = *msgs[len(msgs)-1].SequenceNumber + 1
	}
	return -1, nil
}

// peeker returns the receiver that peeks src, opening it on first use. It
// never receives (its link has no credit), so it locks nothing; the
// client's Close closes it.
func (d *depthReader) peeker(src bus.Source) (*azservicebus.Receiver, error) {
	path := src.Path()
	d.peekMu.Lock()
	defer d.peekMu.Unlock()
	if r := d.peekers[path]; r != nil {
		return r, nil
	}
	r, err := d.b.sdkReceiver(src) // peeks only: it never takes credit, so it locks nothing
	if err != nil {
		return nil, mapErr("peek "+path, err)
	}
	d.peekers[path] = r
	return r, nil
}

// dropPeeker closes a peeker that failed, so the next reading opens another.
func (d *depthReader) dropPeeker(path string) {
	d.peekMu.Lock()
	r := d.peekers[path]
	delete(d.peekers, path)
	d.peekMu.Unlock()
	if r != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		r.Close(ctx) //nolint:errcheck // replaced anyway
		cancel()
	}
}
