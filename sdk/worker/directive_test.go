package worker_test

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"buf.build/go/protovalidate"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
	"github.com/lucius-platform/lucius/sdk/worker"
)

const (
	validJobID = "5f2b1c0e9d8a7b6c5d4e3f2a1b0c9d8e7f6a5b4c3d2e1f0a9b8c7d6e5f4a3b2c"
	validLease = "2c4f6a8e-1b3d-4f5a-8c7e-9d0b1a2c3e4f"
)

func validDirective() *luciusv1.Directive {
	return &luciusv1.Directive{
		JobId: validJobID, TenantId: "acme", StepId: "embedding", StepType: "EMBEDDING", Service: "embedding",
		AttemptNo: 2, LeaseId: validLease, InputRef: "file:///ws/lucius/acme/" + validJobID + "/ocr/1/output.txt",
		JobInputRef:  "file:///in/acme/doc.pdf",
		WorkspaceRef: "file:///ws/lucius/acme/" + validJobID + "/", OutputRef: "file:///out/result.txt",
		CallbackUrls: &luciusv1.CallbackEndpoints{GrpcTarget: "ipv4:127.0.0.1:9091,127.0.0.1:9092"},
	}
}

func TestValidateDirective(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		mutate  func(d *luciusv1.Directive)
		wantErr string // "" means valid
	}{
		{"valid", func(*luciusv1.Directive) {}, ""},
		{"plain path workspace", func(d *luciusv1.Directive) { d.WorkspaceRef = "/ws/lucius/acme/x/" }, ""},
		{"uppercase job id", func(d *luciusv1.Directive) { d.JobId = strings.ToUpper(validJobID) }, "job_id"},
		{"short job id", func(d *luciusv1.Directive) { d.JobId = "abc" }, "job_id"},
		{"empty step id", func(d *luciusv1.Directive) { d.StepId = "" }, "step_id"},
		{"long step id", func(d *luciusv1.Directive) { d.StepId = strings.Repeat("s", 257) }, "step_id"},
		{"attempt zero", func(d *luciusv1.Directive) { d.AttemptNo = 0 }, "attempt_no"},
		{"lease not uuid", func(d *luciusv1.Directive) { d.LeaseId = "lease-1" }, "lease_id"},
		{"step type with slash", func(d *luciusv1.Directive) { d.StepType = "../OCR" }, "step_type"},
		{"no workspace", func(d *luciusv1.Directive) { d.WorkspaceRef = "" }, "workspace_ref"},
		{"blob workspace", func(d *luciusv1.Directive) { d.WorkspaceRef = "az://acct01/work/lucius/acme/x/" }, ""},
		{"blob workspace with a dot segment", func(d *luciusv1.Directive) { d.WorkspaceRef = "az://acct01/work/../x/" }, "workspace_ref"},
		{"https workspace", func(d *luciusv1.Directive) { d.WorkspaceRef = "https://example.com/ws/" }, "workspace_ref"},
		{"remote file host", func(d *luciusv1.Directive) { d.WorkspaceRef = "file://fileserver/ws/" }, "workspace_ref"},
		{"escaping workspace", func(d *luciusv1.Directive) { d.WorkspaceRef = "file:///ws/lucius/%2E%2E/x/" }, "workspace_ref"},
		{"no input", func(d *luciusv1.Directive) { d.InputRef = "" }, "input_ref"},
		{"no document at all", func(d *luciusv1.Directive) { d.InputRef, d.JobInputRef, d.FinalStep, d.OutputRef = "", "", true, "" }, ""},
		{"no grpc target", func(d *luciusv1.Directive) { d.CallbackUrls = &luciusv1.CallbackEndpoints{AckUrl: "http://o/ack"} }, "grpc_target"},
		{"final step without output", func(d *luciusv1.Directive) { d.FinalStep, d.OutputRef = true, "" }, "output_ref"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := validDirective()
			tc.mutate(d)
			err := worker.ValidateDirective(d)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("valid directive rejected: %v", err)
				}
				return
			}
			if !errors.Is(err, worker.ErrInvalidDirective) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error = %v, want ErrInvalidDirective naming %s", err, tc.wantErr)
			}
		})
	}
}

func TestParseDirectiveIgnoresUnknownFieldsAndReportsAllProblems(t *testing.T) {
	t.Parallel()
	body, err := protojson.Marshal(validDirective())
	if err != nil {
		t.Fatal(err)
	}
	withExtra := strings.Replace(string(body), "{", `{"fieldFromTheFuture": 1, `, 1)
	d, err := worker.ParseDirective([]byte(withExtra))
	if err != nil {
		t.Fatalf("unknown field rejected: %v", err)
	}
	if !proto.Equal(d, validDirective()) {
		t.Errorf("parsed %v", d)
	}
	_, err = worker.ParseDirective([]byte(`{"jobId": "x", "attemptNo": 0, "jobInputRef": "file:///in/doc.pdf"}`))
	for _, field := range []string{"job_id", "step_id", "attempt_no", "lease_id", "step_type", "workspace_ref", "input_ref", "grpc_target"} {
		if err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("error %v does not name %s", err, field)
		}
	}
}

func TestStepDirFollowsWorkspaceLayout(t *testing.T) {
	t.Parallel()
	d := validDirective()
	d.WorkspaceRef = "file:///var/lucius/lucius/acme%20corp/" + validJobID + "/"
	got, err := worker.StepDir(d)
	if err != nil {
		t.Fatal(err)
	}
	if want := "/var/lucius/lucius/acme corp/" + validJobID + "/embedding/2"; got != want {
		t.Errorf("StepDir = %s, want %s", got, want)
	}
}

// FuzzValidateDirective checks the validator against the contract: whatever
// it accepts can be acknowledged (the ACK built from it passes the
// orchestrator's protovalidate rules) and its step directory stays inside the
// workspace.
func FuzzValidateDirective(f *testing.F) {
	f.Add(validJobID, "ocr", int32(1), validLease, "OCR", "file:///ws/lucius/acme/j/", "file:///in.txt", "127.0.0.1:9091")
	f.Add(validJobID, "step with spaces/and slash", int32(3), strings.ToUpper(validLease), "SIS", "/ws/x/", "/in", "dns:///o:1")
	f.Add("", "", int32(-1), "", "", "", "", "")
	f.Add(validJobID, "é", int32(2147483647), validLease, "a-b_C", "file://localhost/ws/%2F..%2F/", "x", " ")
	f.Add(validJobID, "s", int32(1), validLease, "T", "file:///ws/%zz/", "file:///i", "t")
	validator, err := protovalidate.New()
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, jobID, stepID string, attempt int32, lease, stepType, workspace, input, target string) {
		d := &luciusv1.Directive{JobId: jobID, StepId: stepID, AttemptNo: attempt, LeaseId: lease, StepType: stepType,
			WorkspaceRef: workspace, InputRef: input, CallbackUrls: &luciusv1.CallbackEndpoints{GrpcTarget: target}}
		if err := worker.ValidateDirective(d); err != nil {
			if !errors.Is(err, worker.ErrInvalidDirective) {
				t.Fatalf("error does not wrap ErrInvalidDirective: %v", err)
			}
			return
		}
		ack := &luciusv1.AckRequest{JobId: jobID, StepId: stepID, AttemptNo: attempt, LeaseId: lease,
			AckTime: timestamppb.Now(), WorkerId: "fuzz"}
		if err := validator.Validate(ack); err != nil {
			t.Fatalf("accepted directive gives an ACK the contract rejects: %v", err)
		}
		dir, err := worker.StepDir(d)
		if err != nil {
			t.Fatalf("accepted directive has no step directory: %v", err)
		}
		rel, err := filepath.Rel(filepath.Dir(filepath.Dir(dir)), dir)
		if err != nil || strings.HasPrefix(rel, "..") || !filepath.IsAbs(dir) {
			t.Fatalf("step directory %s escapes its workspace", dir)
		}
	})
}

// FuzzParseDirective feeds arbitrary bodies: parsing never panics, rejects
// only with ErrInvalidDirective, and what it accepts survives a round trip.
func FuzzParseDirective(f *testing.F) {
	body, _ := protojson.Marshal(validDirective())
	f.Add(body)
	f.Add([]byte(`{}`))
	f.Add([]byte(`{"jobId": 42`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, body []byte) {
		d, err := worker.ParseDirective(body)
		if err != nil {
			if !errors.Is(err, worker.ErrInvalidDirective) {
				t.Fatalf("error does not wrap ErrInvalidDirective: %v", err)
			}
			return
		}
		again, err := protojson.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		d2, err := worker.ParseDirective(again)
		if err != nil || !proto.Equal(d, d2) {
			t.Fatalf("round trip changed the directive: %v", err)
		}
	})
}
