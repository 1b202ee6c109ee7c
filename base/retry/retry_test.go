package retry

import (
	"testing"
	"time"
)

func TestDelayGrowsToMaxWithJitterWithinBounds(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		initial    time.Duration
		max        time.Duration
		multiplier float64
		n          int
		want       time.Duration
	}{
		{"first retry", time.Second, time.Minute, 2, 0, time.Second},
		{"doubles", time.Second, time.Minute, 2, 3, 8 * time.Second},
		{"capped", time.Second, time.Minute, 2, 10, time.Minute},
		{"capped far out", time.Second, time.Minute, 2, 1000, time.Minute},
		{"fixed", 5 * time.Second, time.Minute, 1, 7, 5 * time.Second},
		{"initial above max", 2 * time.Minute, time.Minute, 2, 0, time.Minute},
		{"none", 0, time.Minute, 2, 3, 0},
	}
	for _, tt := range tests {
		if got := Delay(tt.initial, tt.max, tt.multiplier, 0, tt.n); got != tt.want {
			t.Errorf("%s: Delay(%v, %v, %v, 0, %d) = %v, want %v", tt.name, tt.initial, tt.max, tt.multiplier, tt.n, got, tt.want)
		}
	}
	for n := range 8 {
		exact := Delay(200*time.Millisecond, 15*time.Second, 2, 0, n)
		for range 50 {
			d := Delay(200*time.Millisecond, 15*time.Second, 2, 0.2, n)
			if float64(d) < 0.8*float64(exact)-1 || float64(d) > 1.2*float64(exact)+1 || d > 15*time.Second {
				t.Fatalf("retry %d: %v is outside %v ±20%% or above the max", n, d, exact)
			}
		}
	}
}
