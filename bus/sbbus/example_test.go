package sbbus_test

import (
	"context"
	"log"
	"os"

	"github.com/lucius-platform/lucius/bus"
	"github.com/lucius-platform/lucius/bus/sbbus"
)

// A program connects with the namespace's connection string (Lucius's
// services get theirs from package busconfig), declares what it uses and
// receives with peek-lock, renewing the lock while a long handler runs.
func Example() {
	cfg := sbbus.Config{ConnectionString: os.Getenv(sbbus.EnvConnectionString)}
	ctx := context.Background()
	b, err := sbbus.New(cfg)
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close(ctx) //nolint:errcheck
	if err := b.EnsureQueue(ctx, "orchestrator-jobs", bus.QueueOptions{}); err != nil {
		log.Fatal(err)
	}
	r, err := b.NewReceiver(ctx, bus.QueueSource("orchestrator-jobs"))
	if err != nil {
		log.Fatal(err)
	}
	msgs, err := r.Receive(ctx, 10)
	if err != nil {
		log.Fatal(err)
	}
	for _, m := range msgs {
		stop := sbbus.KeepLock(ctx, r, m, 0)
		// ... handle m ...
		stop()
		if err := r.Complete(ctx, m); err != nil {
			log.Print(err) // bus.ErrLockLost: another receiver has it now
		}
	}
}
