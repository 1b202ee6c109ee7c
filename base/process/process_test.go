package process

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/lucius-platform/lucius/base/telemetry"
)

// Not parallel: a signal reaches the whole test process.
func TestRunEndsTheBodysContextOnSIGTERMAndReturnsWhatTheBodyReturns(t *testing.T) {
	stopped := errors.New("stopped by the signal")
	started := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- Run(context.Background(), telemetry.Config{Service: "test", LogFormat: "text"}, func(ctx context.Context, tel *telemetry.Telemetry) error {
			if tel == nil || tel.Logger == nil {
				return errors.New("no telemetry")
			}
			close(started)
			<-ctx.Done()
			return stopped
		})
	}()
	<-started
	if err := syscall.Kill(syscall.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, stopped) {
			t.Fatalf("Run returned %v, want the body's error", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("SIGTERM did not end the body's context")
	}
}

func TestRunEndsTheBodyWhenItsContextEnds(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := Run(ctx, telemetry.Config{Service: "test"}, func(ctx context.Context, _ *telemetry.Telemetry) error {
		<-ctx.Done()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestRunRefusesBadTelemetrySettingsWithoutRunningTheBody(t *testing.T) {
	ran := false
	err := Run(context.Background(), telemetry.Config{Service: "test", LogFormat: "xml"}, func(context.Context, *telemetry.Telemetry) error {
		ran = true
		return nil
	})
	if err == nil || ran {
		t.Fatalf("Run with LogFormat xml: err %v, body ran %v", err, ran)
	}
}
