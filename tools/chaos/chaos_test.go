package chaos

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/lucius-platform/lucius/core/workflow"
	"github.com/lucius-platform/lucius/tools/stack"
)

var binDir string

// TestMain finds the binaries `make build` made (LUCIUS_BIN_DIR, as `make
// test` sets it) or builds them when the test runs on its own.
func TestMain(m *testing.M) {
	flag.Parse() // for testing.Short
	binDir = os.Getenv("LUCIUS_BIN_DIR")
	if binDir == "" && !testing.Short() {
		dir, err := os.MkdirTemp("", "lucius-chaos-bin-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		if err := stack.Build(context.Background(), "../..", dir); err != nil {
			fmt.Fprintln(os.Stderr, "chaos: build:", err)
			os.RemoveAll(dir)
			os.Exit(1)
		}
		binDir = dir
		code := m.Run()
		os.RemoveAll(dir)
		os.Exit(code)
	}
	os.Exit(m.Run())
}

// TestChaosShort is the short chaos run of `make test`: 80 jobs while every
// kind of process is killed at least three times and PostgreSQL restarts
// once; the run must find no problem.
func TestChaosShort(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the whole suite and kills it for a minute")
	}
	t.Parallel()
	dir, err := os.MkdirTemp("", "lucius-chaos-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	logs, progress := &stack.LogBuffer{}, &stack.LogBuffer{}
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	// LUCIUS_E2E_BUS=servicebus runs it on the Service Bus test broker, as
	// `make test` does after the PostgreSQL bus run.
	report, err := Run(context.Background(), Config{BinDir: binDir, DataDir: dir, Bus: os.Getenv("LUCIUS_E2E_BUS"), Jobs: 80, Rate: 8, Seed: seed,
		KillEvery: 700 * time.Millisecond, Down: Range{200 * time.Millisecond, 1500 * time.Millisecond}, MinKills: 3,
		PGRestart: true, FaultRate: 0.25, Timeout: 100 * time.Second, Output: logs, Progress: progress})
	if err != nil {
		t.Logf("suite logs (last 200 lines):\n%s", logs.Tail(200))
		t.Fatal(err)
	}
	var out strings.Builder
	report.Print(&out)
	t.Logf("progress:\n%s\n%s", progress.Tail(200), out.String())
	if len(report.Problems) > 0 {
		t.Logf("suite logs (last 300 lines):\n%s", logs.Tail(300))
		t.Errorf("the chaos run found %d problems (see the report)", len(report.Problems))
	}
}

func TestChaosWorkflowPassesTheFaultToEveryTask(t *testing.T) {
	t.Parallel()
	catalog := workflow.NewCatalog()
	if _, err := workflow.LoadDir(workflow.BuiltinFiles(), catalog); err != nil {
		t.Fatal(err)
	}
	def, err := workflow.Parse("chaos.yaml", []byte(workflowYAML), catalog)
	if err != nil {
		t.Fatal(err)
	}
	fault := (&Fault{Handler: "EMBEDDING", Kind: FaultRetryable, Attempts: 2}).payload()
	for _, tc := range []struct {
		name    string
		payload map[string]any
		want    map[string]any
	}{
		{"with a fault", map[string]any{"job": 1.0, "fault": fault}, map[string]any{"fault": fault}},
		{"without one, the param is left out", map[string]any{"job": 1.0}, map[string]any{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inputs, violations := def.Bind(tc.payload)
			if len(violations) > 0 {
				t.Fatalf("payload refused: %v", violations)
			}
			services := map[string]string{}
			for _, n := range def.Nodes {
				if n.Type != workflow.TypeTask {
					continue
				}
				services[n.Task.Handler] = n.Task.Service
				params := map[string]any{}
				for k, tpl := range n.Task.Params {
					if v := tpl.Render(workflow.Scope{Inputs: inputs}); v != nil {
						params[k] = v
					}
				}
				if !reflect.DeepEqual(params, tc.want) {
					t.Errorf("node %s params = %v, want %v", n.ID, params, tc.want)
				}
			}
			want := map[string]string{"OCR": "ocr", "EMBEDDING": "embedding", "SIS": "sis"}
			if !reflect.DeepEqual(services, want) {
				t.Errorf("handlers → services = %v, want %v (the workers the suite starts)", services, want)
			}
		})
	}
}

func TestExpectedOutcomeFollowsTheFault(t *testing.T) {
	t.Parallel()
	sh := testShape(t)
	for _, tc := range []struct {
		fault *Fault
		want  string
	}{
		{nil, statusSucceeded},
		{&Fault{Step: "ocr", Kind: FaultPermanent}, statusFailedFinal},
		{&Fault{Step: "embedding", Kind: FaultRetryable, Attempts: 2}, statusSucceeded},
		{&Fault{Step: "embedding", Kind: FaultRetryable, Attempts: 5}, statusSucceeded},
		{&Fault{Step: "embedding", Kind: FaultRetryable, Attempts: 6}, statusFailedFinal},
		{&Fault{Step: "sis", Kind: FaultRetryable, Attempts: 7}, statusFailedFinal},
		{&Fault{Step: "sis", Kind: FaultSleep, Sleep: 3 * time.Second}, statusSucceeded},
	} {
		name := "none"
		if tc.fault != nil {
			name = tc.fault.String()
		}
		t.Run(name, func(t *testing.T) {
			if got := sh.expected(tc.fault); got != tc.want {
				t.Errorf("expected(%s) = %s, want %s", name, got, tc.want)
			}
		})
	}
}

func TestPlanFaultsDrawsTheRateOfFaultsOnRealSteps(t *testing.T) {
	t.Parallel()
	sh := testShape(t)
	plan := func() []*Fault { return planFaults(rand.New(rand.NewPCG(42, 0)), 10000, 0.2, sh) }
	faults := plan()
	if !reflect.DeepEqual(faults, plan()) {
		t.Error("the same seed drew another plan")
	}
	kinds := map[string]int{}
	n := 0
	for _, f := range faults {
		if f == nil {
			continue
		}
		n++
		kinds[sh.expected(f)+" "+f.Kind]++
		if s, ok := sh.step(f.Step); !ok || s.Handler != f.Handler {
			t.Fatalf("fault %v names step %q handler %q, not a step of the workflow", f, f.Step, f.Handler)
		}
	}
	if n < 1800 || n > 2200 {
		t.Errorf("%d of 10000 jobs faulted, want about 2000", n)
	}
	for _, k := range []string{"FAILED_FINAL permanent", "SUCCEEDED retryable", "FAILED_FINAL retryable", "SUCCEEDED sleep"} {
		if kinds[k] == 0 {
			t.Errorf("no %s fault drawn: %v", k, kinds)
		}
	}
}

// goodJob is a job that passes every check; each case below breaks it once.
func goodJob(fault *Fault) *jobRecord {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	j := &jobRecord{ID: "j1", Fault: fault, Status: statusSucceeded, ReceivedAt: t0, CompletedAt: t0.Add(time.Second), Steps: map[string]*stepRecord{},
		Events: []event{{Type: "JOB_STATUS_CHANGED", From: "IN_PROGRESS", To: statusSucceeded, At: t0.Add(time.Second)}}}
	for _, id := range []string{"ocr", "embedding", "sis"} {
		j.Steps[id] = &stepRecord{ID: id, Status: statusSucceeded, AttemptNo: 1, Effects: 1, SucceededEvents: 1, SucceededExecutions: 1}
	}
	return j
}

// failedJob is a job that failed as its permanent fault at embedding says.
func failedJob() *jobRecord {
	j := goodJob(&Fault{Step: "embedding", Handler: "EMBEDDING", Kind: FaultPermanent})
	j.Status = statusFailedFinal
	j.Events[0].To = statusFailedFinal
	j.Steps["embedding"] = &stepRecord{ID: "embedding", Status: statusFailedFinal, AttemptNo: 1,
		Reason: "INJECTED_FAULT: injected permanent failure on attempt 1"}
	j.Steps["sis"] = &stepRecord{ID: "sis", Status: "PENDING"}
	return j
}

func TestChecksCatchEachViolation(t *testing.T) {
	t.Parallel()
	sh := testShape(t)
	for _, tc := range []struct {
		name  string
		job   func() *jobRecord
		wants string // a substring of the only problem; "" for none
	}{
		{"a succeeded job passes", func() *jobRecord { return goodJob(nil) }, ""},
		{"a job failed by its permanent fault passes", failedJob, ""},
		{"a step cancelled after its job failed may have committed", func() *jobRecord {
			j := failedJob()
			j.Steps["sis"] = &stepRecord{ID: "sis", Status: statusCancelled, Effects: 1}
			return j
		}, ""},
		{"not terminal", func() *jobRecord {
			j := goodJob(nil)
			j.Status, j.CurrentStep, j.Events = "IN_PROGRESS", "sis", nil
			j.Steps["sis"] = &stepRecord{ID: "sis", Status: "AWAITING_ACK", AttemptNo: 2}
			return j
		}, "is not terminal: IN_PROGRESS, current step sis AWAITING_ACK at attempt 2"},
		{"succeeded despite a permanent fault", func() *jobRecord {
			return goodJob(&Fault{Step: "ocr", Kind: FaultPermanent})
		}, "ended SUCCEEDED, want FAILED_FINAL"},
		{"ended twice", func() *jobRecord {
			j := goodJob(nil)
			j.Events = append(j.Events, j.Events[0])
			return j
		}, "is SUCCEEDED but its events end it 2 times"},
		{"ended as another status than it has", func() *jobRecord {
			j := goodJob(nil)
			j.Events[0].To = statusCancelled
			return j
		}, "is SUCCEEDED but its events end it 1 times (CANCELLED)"},
		{"failed without a fault", func() *jobRecord {
			j := failedJob()
			j.Fault = nil
			return j
		}, "ended FAILED_FINAL, want SUCCEEDED; failed embedding after 1 attempts"},
		{"failed at another step than the faulted one", func() *jobRecord {
			j := failedJob()
			j.Fault.Step = "ocr"
			return j
		}, "its faulted step ocr is SUCCEEDED"},
		{"failed by the chaos, not the permanent fault", func() *jobRecord {
			j := failedJob()
			j.Steps["embedding"].Reason = "no ACK within 5s"
			return j
		}, "for another reason than its fault"},
		{"succeeded with a step not succeeded", func() *jobRecord {
			j := goodJob(nil)
			delete(j.Steps, "sis")
			return j
		}, "its step sis is missing"},
		{"succeeded step without an effect", func() *jobRecord {
			j := goodJob(nil)
			j.Steps["ocr"].Effects = 0
			return j
		}, "SUCCEEDED with 0 worker effects"},
		{"succeeded step applied twice", func() *jobRecord {
			j := goodJob(nil)
			j.Steps["embedding"].SucceededEvents = 2
			return j
		}, "moved to SUCCEEDED 2 times, want once"},
		{"failed step with an effect", func() *jobRecord {
			j := failedJob()
			j.Steps["embedding"].Effects = 1
			return j
		}, "is FAILED_FINAL but a worker committed its effect"},
		{"failed step that moved to SUCCEEDED", func() *jobRecord {
			j := failedJob()
			j.Steps["embedding"].SucceededEvents = 1
			return j
		}, "is FAILED_FINAL but moved to SUCCEEDED 1 times"},
		{"a job left a terminal status", func() *jobRecord {
			j := goodJob(nil)
			j.Events = append(j.Events, event{Type: "JOB_STATUS_CHANGED", From: statusSucceeded, To: "IN_PROGRESS"})
			return j
		}, "JOB_STATUS_CHANGED of step \"\" from terminal SUCCEEDED to IN_PROGRESS"},
		{"a step left a terminal status", func() *jobRecord {
			j := goodJob(nil)
			j.Events = append(j.Events, event{Type: "STEP_STATUS_CHANGED", StepID: "ocr", From: "SKIPPED", To: "DISPATCHING"})
			return j
		}, "from terminal SKIPPED to DISPATCHING"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			problems := check(&snapshot{jobs: []*jobRecord{tc.job()}, requests: 1}, sh)
			switch {
			case tc.wants == "" && len(problems) > 0:
				t.Errorf("problems %q, want none", problems)
			case tc.wants != "" && (len(problems) != 1 || !strings.Contains(problems[0], tc.wants)):
				t.Errorf("problems %q, want one containing %q", problems, tc.wants)
			}
		})
	}
}

func TestChecksCatchPhantomRequestsAndEffects(t *testing.T) {
	t.Parallel()
	problems := check(&snapshot{jobs: []*jobRecord{goodJob(nil)}, requests: 2, orphanEffects: []string{"j1/ghost"}}, testShape(t))
	if len(problems) != 2 {
		t.Errorf("problems %q, want the orphan effect and the extra request", problems)
	}
}

func TestWaitAfterMeasuresFromTheEndOfDeliberateWaits(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	sleepy := &Fault{Step: "sis", Kind: FaultSleep, Sleep: 2 * time.Second}
	for _, tc := range []struct {
		name     string
		fault    *Fault
		received time.Time
		done     time.Time
		events   []event
		kill     time.Time
		want     time.Duration
		live     bool
	}{
		{name: "next event after the kill", received: at(0), kill: at(1000),
			events: []event{{Type: "JOB_ACCEPTED", At: at(0)}, {Type: "JOB_QUEUED", At: at(3500)}}, want: 2500 * time.Millisecond, live: true},
		{name: "accepted after the kill", received: at(2000), kill: at(1000),
			events: []event{{Type: "JOB_ACCEPTED", At: at(2000)}}},
		{name: "ended before the kill", received: at(0), done: at(500), kill: at(1000),
			events: []event{{Type: "JOB_ACCEPTED", At: at(0)}, {Type: "JOB_STATUS_CHANGED", At: at(500)}}},
		{name: "no event after the kill is left to the terminal check", received: at(0), kill: at(1000),
			events: []event{{Type: "JOB_ACCEPTED", At: at(0)}}},
		{name: "a retry backoff is not a stall", received: at(0), kill: at(1000), live: true, want: 300 * time.Millisecond,
			events: []event{{Type: "ATTEMPT_CREATED", At: at(500), DeliverAt: at(1500)}, {Type: "STEP_STATUS_CHANGED", At: at(1800)}}},
		{name: "an injected sleep is not a stall", fault: sleepy, received: at(0), kill: at(1000), live: true, want: time.Second,
			events: []event{{Type: "STEP_STATUS_CHANGED", StepID: "sis", To: "IN_PROGRESS", At: at(500)}, {Type: "STEP_STATUS_CHANGED", StepID: "sis", At: at(3500)}}},
		{name: "a sleep restarts when a worker takes the attempt over", fault: sleepy, received: at(0), kill: at(6000), live: true, want: 500 * time.Millisecond,
			events: []event{
				{Type: "STEP_STATUS_CHANGED", StepID: "sis", To: "IN_PROGRESS", At: at(500)},
				{Type: "CALLBACK_DUPLICATE", StepID: "sis", Callback: "ACK", At: at(5500)},
				{Type: "STEP_STATUS_CHANGED", StepID: "sis", To: statusSucceeded, At: at(8000)}}},
		{name: "a sleep on another step is a stall", fault: sleepy, received: at(0), kill: at(1000), live: true, want: 2500 * time.Millisecond,
			events: []event{{Type: "STEP_STATUS_CHANGED", StepID: "ocr", To: "IN_PROGRESS", At: at(500)}, {Type: "STEP_STATUS_CHANGED", StepID: "ocr", At: at(3500)}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := &jobRecord{ID: "j", Fault: tc.fault, ReceivedAt: tc.received, CompletedAt: tc.done, Events: tc.events}
			got, live := waitAfter(j, tc.kill)
			if got != tc.want || live != tc.live {
				t.Errorf("waitAfter = %s, %v; want %s, %v", got, live, tc.want, tc.live)
			}
		})
	}
}

func testShape(t *testing.T) shape {
	t.Helper()
	sh, err := loadShape()
	if err != nil {
		t.Fatal(err)
	}
	return sh
}
