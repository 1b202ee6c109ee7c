package reconciler

import (
	"slices"
	"testing"

	"github.com/lucius-platform/lucius/core/ledger"
)

// A notification wakes only the loops its payload names; an empty one (the
// catch-up after a reconnect) wakes every loop.
func TestPokeWakesTheLoopsThePayloadNames(t *testing.T) {
	t.Parallel()
	tests := []struct {
		payload string
		want    []string
	}{
		{"", []string{ledger.NotifyCallbacks, ledger.NotifyPublish}},
		{ledger.NotifyPublish, []string{ledger.NotifyPublish}},
		{ledger.NotifyCallbacks, []string{ledger.NotifyCallbacks}},
		{ledger.NotifyPublish + "," + ledger.NotifyCallbacks, []string{ledger.NotifyCallbacks, ledger.NotifyPublish}},
		{"something-else", nil},
	}
	for _, tt := range tests {
		t.Run(tt.payload, func(t *testing.T) {
			t.Parallel()
			chans := map[string]chan struct{}{ledger.NotifyPublish: make(chan struct{}, 1), ledger.NotifyCallbacks: make(chan struct{}, 1)}
			wakes := map[string]chan<- struct{}{}
			for k, c := range chans {
				wakes[k] = c
			}
			poke(wakes, tt.payload)
			poke(wakes, tt.payload) // a second poke while one is pending does not block
			var woken []string
			for k, c := range chans {
				select {
				case <-c:
					woken = append(woken, k)
				default:
				}
			}
			slices.Sort(woken)
			if !slices.Equal(woken, tt.want) {
				t.Fatalf("payload %q woke %v, want %v", tt.payload, woken, tt.want)
			}
		})
	}
}
