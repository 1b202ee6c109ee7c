package process

import (
	"strings"
	"testing"
	"time"

	"github.com/lucius-platform/lucius/base/env"
)

func TestClock(t *testing.T) {
	t.Parallel()
	epoch := time.Now().Add(-time.Minute).UTC()
	tests := []struct {
		env     map[string]string
		err     string
		atLeast time.Duration // how far past the epoch now is, at least
	}{
		{env: map[string]string{}, atLeast: time.Minute},
		{env: map[string]string{"LUCIUS_CLOCK_SPEEDUP": "60", "LUCIUS_CLOCK_EPOCH": epoch.Format(time.RFC3339Nano)}, atLeast: time.Hour},
		{env: map[string]string{"LUCIUS_CLOCK_SPEEDUP": "0.5", "LUCIUS_CLOCK_EPOCH": epoch.Format(time.RFC3339Nano)}, err: "at least 1"},
		{env: map[string]string{"LUCIUS_CLOCK_SPEEDUP": "fast"}, err: "want a number"},
		{env: map[string]string{"LUCIUS_CLOCK_SPEEDUP": "10"}, err: "LUCIUS_CLOCK_EPOCH"},
	}
	for _, tt := range tests {
		now, err := Clock(env.FromMap(tt.env))
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%v: error %v, want %q", tt.env, err, tt.err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%v: %v", tt.env, err)
		}
		if got := now().Sub(epoch); got < tt.atLeast || got > tt.atLeast+time.Hour {
			t.Errorf("%v: %s past the epoch, want about %s", tt.env, got, tt.atLeast)
		}
	}
}
