package faults

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/structpb"

	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
	"github.com/lucius-platform/lucius/sdk/worker"
)

func TestParseFault(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		payload map[string]any // nil: no payload at all
		want    fault
		wantOK  bool
		wantErr string
	}{
		{name: "no payload"},
		{name: "no fault", payload: map[string]any{"language": "en"}},
		{name: "null fault", payload: map[string]any{"fault": nil}},
		{name: "another step type", payload: map[string]any{"fault": map[string]any{"step_type": "SIS", "kind": "permanent"}}},
		{name: "no step type", payload: map[string]any{"fault": map[string]any{"kind": "permanent"}}},
		{name: "step type is case-sensitive", payload: map[string]any{"fault": map[string]any{"step_type": "ocr", "kind": "permanent"}}},
		{
			name:    "retryable",
			payload: map[string]any{"fault": map[string]any{"step_type": "OCR", "kind": "retryable", "attempts": 2}},
			want:    fault{kind: faultRetryable, attempts: 2}, wantOK: true,
		},
		{
			name:    "permanent",
			payload: map[string]any{"fault": map[string]any{"step_type": "OCR", "kind": "permanent"}},
			want:    fault{kind: faultPermanent}, wantOK: true,
		},
		{
			name:    "permanent on early attempts",
			payload: map[string]any{"fault": map[string]any{"step_type": "OCR", "kind": "permanent", "attempts": 1}},
			want:    fault{kind: faultPermanent, attempts: 1}, wantOK: true,
		},
		{
			name:    "sleep",
			payload: map[string]any{"fault": map[string]any{"step_type": "OCR", "kind": "sleep", "ms": 1500}},
			want:    fault{kind: faultSleep, sleep: 1500 * time.Millisecond}, wantOK: true,
		},
		{
			name:    "sleep of zero",
			payload: map[string]any{"fault": map[string]any{"step_type": "OCR", "kind": "sleep", "ms": 0}},
			want:    fault{kind: faultSleep}, wantOK: true,
		},
		{name: "not an object", payload: map[string]any{"fault": "permanent"}, wantErr: "want an object"},
		{name: "unknown kind", payload: map[string]any{"fault": map[string]any{"step_type": "OCR", "kind": "explode"}}, wantErr: `unknown kind "explode"`},
		{name: "missing kind", payload: map[string]any{"fault": map[string]any{"step_type": "OCR"}}, wantErr: `unknown kind ""`},
		{name: "retryable without attempts", payload: map[string]any{"fault": map[string]any{"step_type": "OCR", "kind": "retryable"}}, wantErr: "needs attempts"},
		{name: "retryable with zero attempts", payload: map[string]any{"fault": map[string]any{"step_type": "OCR", "kind": "retryable", "attempts": 0}}, wantErr: "fault.attempts"},
		{name: "fractional attempts", payload: map[string]any{"fault": map[string]any{"step_type": "OCR", "kind": "retryable", "attempts": 1.5}}, wantErr: "fault.attempts"},
		{name: "attempts as a string", payload: map[string]any{"fault": map[string]any{"step_type": "OCR", "kind": "retryable", "attempts": "2"}}, wantErr: "fault.attempts"},
		{name: "sleep without ms", payload: map[string]any{"fault": map[string]any{"step_type": "OCR", "kind": "sleep"}}, wantErr: "needs ms"},
		{name: "negative sleep", payload: map[string]any{"fault": map[string]any{"step_type": "OCR", "kind": "sleep", "ms": -5}}, wantErr: "fault.ms"},
		{name: "sleep over a day", payload: map[string]any{"fault": map[string]any{"step_type": "OCR", "kind": "sleep", "ms": 9e10}}, wantErr: "fault.ms"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var payload *structpb.Struct
			if tc.payload != nil {
				var err error
				if payload, err = structpb.NewStruct(tc.payload); err != nil {
					t.Fatal(err)
				}
			}
			got, ok, err := parseFault(payload, "OCR")
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || ok {
					t.Fatalf("parseFault = %+v, %v, %v; want an error containing %q", got, ok, err, tc.wantErr)
				}
				return
			}
			if err != nil || ok != tc.wantOK || got != tc.want {
				t.Errorf("parseFault = %+v, %v, %v; want %+v, %v", got, ok, err, tc.want, tc.wantOK)
			}
		})
	}
}

func TestFaultInject(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		f          fault
		attemptNo  int
		wantClass  luciusv1.FailureClass // UNSPECIFIED: no failure
		wantReason string
		minTook    time.Duration
	}{
		{"retryable on attempt 1 of 2", fault{kind: faultRetryable, attempts: 2}, 1, luciusv1.FailureClass_FAILURE_CLASS_RETRYABLE,
			"INJECTED_FAULT: injected retryable failure on attempt 1 (fault.attempts = 2)", 0},
		{"retryable on its last attempt", fault{kind: faultRetryable, attempts: 2}, 2, luciusv1.FailureClass_FAILURE_CLASS_RETRYABLE,
			"INJECTED_FAULT: injected retryable failure on attempt 2 (fault.attempts = 2)", 0},
		{"retryable past its attempts", fault{kind: faultRetryable, attempts: 2}, 3, luciusv1.FailureClass_FAILURE_CLASS_UNSPECIFIED, "", 0},
		{"permanent", fault{kind: faultPermanent}, 4, luciusv1.FailureClass_FAILURE_CLASS_NON_RETRYABLE,
			"INJECTED_FAULT: injected permanent failure on attempt 4", 0},
		{"permanent past its attempts", fault{kind: faultPermanent, attempts: 1}, 2, luciusv1.FailureClass_FAILURE_CLASS_UNSPECIFIED, "", 0},
		{"sleep", fault{kind: faultSleep, sleep: 50 * time.Millisecond}, 1, luciusv1.FailureClass_FAILURE_CLASS_UNSPECIFIED, "", 50 * time.Millisecond},
		{"sleep past its attempts", fault{kind: faultSleep, sleep: time.Hour, attempts: 1}, 2, luciusv1.FailureClass_FAILURE_CLASS_UNSPECIFIED, "", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			began := time.Now()
			err := tc.f.inject(context.Background(), tc.attemptNo)
			class, reason := worker.Classify(err)
			if class != tc.wantClass || reason != tc.wantReason {
				t.Errorf("inject = %v, %q; want %v, %q", class, reason, tc.wantClass, tc.wantReason)
			}
			if took := time.Since(began); took < tc.minTook || took > tc.minTook+5*time.Second {
				t.Errorf("inject took %v, want about %v", took, tc.minTook)
			}
		})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	began := time.Now()
	if err := (fault{kind: faultSleep, sleep: time.Hour}).inject(ctx, 1); err != nil || time.Since(began) > 5*time.Second {
		t.Errorf("a cancelled sleep returned %v after %v, want nil at once", err, time.Since(began))
	}
}
