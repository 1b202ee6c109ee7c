package worker

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/lucius-platform/lucius/base/loop"
	"github.com/lucius-platform/lucius/base/telemetry"
	"github.com/lucius-platform/lucius/bus"
)

// minRenewWait keeps renewals of an (almost) expired lock from spinning.
const minRenewWait = 50 * time.Millisecond

// lockKeeper renews the lock of one message in hand until stopped, and lets
// the handler tie its execution claim to the lock (onRenew).
type lockKeeper struct {
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once

	mu      sync.Mutex
	until   time.Time
	renewed func(ctx context.Context, until time.Time)
}

// keepLock starts renewing m's lock every Config.LockRenewInterval, and at
// least twice per remaining lock time. A lost lock ends the renewals; the
// handler goes on (settling will then fail, and the redelivery finds the
// attempt's record).
func (r *Runner) keepLock(ctx context.Context, rcv bus.Receiver, m *bus.Received) *lockKeeper {
	kctx, cancel := context.WithCancel(ctx) //nolint:gosec // G118: the keeper holds cancel and calls it when the message is settled
	k := &lockKeeper{cancel: cancel, done: make(chan struct{}), until: m.LockedUntil}
	go func() {
		defer close(k.done)
		failures := 0
		for {
			wait := min(r.cfg.LockRenewInterval, time.Until(k.lockedUntil())/2)
			if failures > 0 {
				wait = min(wait, r.cfg.Backoff.Delay(failures-1))
			}
			loop.Sleep(kctx, max(wait, minRenewWait))
			if kctx.Err() != nil {
				return
			}
			until, err := rcv.RenewLock(kctx, m)
			if kctx.Err() != nil {
				return
			}
			if errors.Is(err, bus.ErrLockLost) {
				r.log.WarnContext(kctx, "directive lock lost; the message will be redelivered",
					telemetry.KeyMessageID, m.ID, telemetry.Err(err))
				return
			}
			if err != nil {
				failures++
				r.log.WarnContext(kctx, "renew directive lock", telemetry.KeyMessageID, m.ID, telemetry.Err(err))
				continue
			}
			failures = 0
			k.mu.Lock()
			k.until = until
			renewed := k.renewed
			k.mu.Unlock()
			if renewed != nil {
				renewed(kctx, until)
			}
		}
	}()
	return k
}

// lockedUntil is the lock's current expiry.
func (k *lockKeeper) lockedUntil() time.Time {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.until
}

// onRenew sets a function called after each successful renewal.
func (k *lockKeeper) onRenew(f func(ctx context.Context, until time.Time)) {
	k.mu.Lock()
	k.renewed = f
	k.mu.Unlock()
}

// stop ends the renewals and waits for the renewing goroutine to exit.
func (k *lockKeeper) stop() {
	k.once.Do(k.cancel)
	<-k.done
}

// heldLocks hands each received message's lock keeper from the moment the
// message is received to whoever settles it.
type heldLocks struct {
	mu      sync.Mutex
	keepers map[*bus.Received]*lockKeeper
}

func (h *heldLocks) put(m *bus.Received, k *lockKeeper) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.keepers == nil {
		h.keepers = make(map[*bus.Received]*lockKeeper)
	}
	h.keepers[m] = k
}

// take returns m's keeper and forgets it.
func (h *heldLocks) take(m *bus.Received) *lockKeeper {
	h.mu.Lock()
	defer h.mu.Unlock()
	k := h.keepers[m]
	delete(h.keepers, m)
	return k
}
