package membus_test

import (
	"context"
	"fmt"
	"log"

	"github.com/lucius-platform/lucius/bus"
	"github.com/lucius-platform/lucius/bus/membus"
)

// A test declares what the code under test uses, sends to it and receives
// with peek-lock, as against a production bus.
func Example() {
	ctx := context.Background()
	b, err := membus.New(membus.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close(ctx) //nolint:errcheck
	if err := b.EnsureQueue(ctx, "jobs", bus.QueueOptions{}); err != nil {
		log.Fatal(err)
	}
	s, err := b.NewSender(ctx, "jobs")
	if err != nil {
		log.Fatal(err)
	}
	if err := s.Send(ctx, bus.Message{ID: "job-1", Body: []byte("hello")}); err != nil {
		log.Fatal(err)
	}
	r, err := b.NewReceiver(ctx, bus.QueueSource("jobs"))
	if err != nil {
		log.Fatal(err)
	}
	msgs, err := r.Receive(ctx, 10)
	if err != nil {
		log.Fatal(err)
	}
	for _, m := range msgs {
		fmt.Printf("%s %s delivery %d\n", m.ID, m.Body, m.DeliveryCount)
		if err := r.Complete(ctx, m); err != nil {
			log.Fatal(err)
		}
	}
	// Output: job-1 hello delivery 1
}
