package worker_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolterrors "go.etcd.io/bbolt/errors"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
	"github.com/lucius-platform/lucius/sdk/worker"
	"github.com/lucius-platform/lucius/sdk/worker/storetest"
)

func open(t *testing.T, path string) *worker.LocalStore {
	t.Helper()
	s, err := worker.OpenLocalStore(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	return s
}

func TestConformance(t *testing.T) {
	t.Parallel()
	store := open(t, filepath.Join(t.TempDir(), "worker.db"))
	storetest.Run(t, func(*testing.T) worker.Store { return store })
}

// A worker restarted on its file still knows what it executed.
func TestRecordsSurviveReopen(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "worker.db")
	finished := worker.Key{JobID: strings.Repeat("a", 64), StepID: "ocr", AttemptNo: 1, LeaseID: "6f1c1e8e-6a0b-4bbf-9b39-0f5d0c1b2a3c"}
	running := finished
	running.StepID = "embedding"
	want := &luciusv1.ResultRequest{JobId: finished.JobID, StepId: finished.StepID, AttemptNo: 1, LeaseId: finished.LeaseID,
		Status: luciusv1.ResultStatus_RESULT_STATUS_SUCCEEDED, WorkerId: "w1", FinishTime: timestamppb.Now()}

	s, err := worker.OpenLocalStore(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []worker.Key{finished, running} {
		if _, err := s.Claim(ctx, worker.Claim{Key: k, Service: "ocr", WorkerID: "w1", Until: time.Now().Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Finish(ctx, finished, "w1", want, &worker.Effect{Key: finished, Service: "ocr", WorkerID: "w1"}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = open(t, path)
	for _, tc := range []struct {
		key   worker.Key
		state worker.ClaimState
	}{
		{finished, worker.ClaimDone},
		{running, worker.ClaimBusy},
	} {
		got, err := s.Claim(ctx, worker.Claim{Key: tc.key, Service: "ocr", WorkerID: "w2", Until: time.Now().Add(time.Hour)})
		if err != nil {
			t.Fatal(err)
		}
		if got.State != tc.state {
			t.Errorf("claim of %s after reopen = %v, want %v", tc.key, got.State, tc.state)
		}
		if tc.state == worker.ClaimDone && !proto.Equal(got.Result, want) {
			t.Errorf("stored result after reopen = %v, want %v", got.Result, want)
		}
	}
	later := finished
	later.AttemptNo, later.LeaseID = finished.AttemptNo+1, "l9"
	if _, err := s.Claim(ctx, worker.Claim{Key: later, Service: "ocr", WorkerID: "w2", Until: time.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if inserted, err := s.Finish(ctx, later, "w2", want, &worker.Effect{Key: later, Service: "ocr", WorkerID: "w2"}); err != nil || inserted {
		t.Errorf("a later attempt's effect after reopen: inserted %v (%v), want the first one kept", inserted, err)
	}
}

func TestOpenCreatesPrivateFile(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "state", "worker")
	path := filepath.Join(dir, "worker.db")
	open(t, path)
	for _, tc := range []struct {
		path string
		mode os.FileMode
	}{
		{dir, os.ModeDir | 0o700},
		{path, 0o600},
	} {
		fi, err := os.Stat(tc.path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode() != tc.mode {
			t.Errorf("mode of %s = %v, want %v", tc.path, fi.Mode(), tc.mode)
		}
	}
}

// A second instance on the same file fails at once instead of sharing it.
func TestOpenLockedFileFails(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "worker.db")
	first, err := worker.OpenLocalStore(path)
	if err != nil {
		t.Fatal(err)
	}
	second, err := worker.OpenLocalStore(path)
	if err == nil {
		second.Close()
		t.Fatal("second Open of a locked file succeeded")
	}
	if !errors.Is(err, bolterrors.ErrTimeout) || !strings.Contains(err.Error(), path) {
		t.Errorf("second Open: %v, want a lock timeout naming %s", err, path)
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	open(t, path) // the lock goes with Close
}

func TestOpenRefusesUnusablePath(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, []byte("not a directory"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		path string
	}{
		{"empty path", ""},
		{"parent is a file", filepath.Join(file, "worker.db")},
		{"parent not creatable under a file", filepath.Join(file, "state", "worker.db")},
		{"path is a directory", dir},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := worker.OpenLocalStore(tc.path)
			if err == nil {
				s.Close()
				t.Fatalf("Open(%q) succeeded", tc.path)
			}
			if !strings.HasPrefix(err.Error(), "localstore: open") || !strings.Contains(err.Error(), tc.path) {
				t.Errorf("Open(%q): %v, want an error naming the path", tc.path, err)
			}
		})
	}
}

// Keys whose components concatenate alike are distinct attempts, and
// distinct steps unless job and step are equal.
func TestKeysDoNotRunTogether(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := open(t, filepath.Join(t.TempDir(), "worker.db"))
	for _, tc := range []struct {
		name     string
		a, b     worker.Key
		sameStep bool
	}{
		{"job into step", worker.Key{JobID: "ab", StepID: "c", AttemptNo: 1, LeaseID: "l"},
			worker.Key{JobID: "a", StepID: "bc", AttemptNo: 1, LeaseID: "l"}, false},
		{"attempt into lease", worker.Key{JobID: "j", StepID: "s", AttemptNo: 1, LeaseID: "2l"},
			worker.Key{JobID: "j", StepID: "s", AttemptNo: 12, LeaseID: "l"}, true},
		{"separator in a component", worker.Key{JobID: "j", StepID: "s\x00", AttemptNo: 1, LeaseID: "l"},
			worker.Key{JobID: "j\x00s", StepID: "", AttemptNo: 1, LeaseID: "l"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for i, k := range []worker.Key{tc.a, tc.b} {
				got, err := s.Claim(ctx, worker.Claim{Key: k, Service: "ocr", WorkerID: "w1", Until: time.Now().Add(time.Hour)})
				if err != nil {
					t.Fatal(err)
				}
				if got.State != worker.ClaimAcquired {
					t.Errorf("claim of %+v = %v, want acquired", k, got.State)
				}
				inserted, err := s.Finish(ctx, k, "w1", &luciusv1.ResultRequest{JobId: k.JobID, StepId: k.StepID},
					&worker.Effect{Key: k, Service: "ocr", WorkerID: "w1"})
				if err != nil {
					t.Fatal(err)
				}
				if want := i == 0 || !tc.sameStep; inserted != want {
					t.Errorf("effect of %+v inserted = %v, want %v", k, inserted, want)
				}
			}
		})
	}
}
