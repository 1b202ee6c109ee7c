package worker

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"

	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
	"github.com/lucius-platform/lucius/sdk/worker/blob"
)

// Key identifies one attempt of one step: the idempotency key of the
// directive contract. Two directives with the same Key are the same work.
type Key struct {
	JobID     string
	StepID    string
	AttemptNo int
	LeaseID   string
}

// KeyOf returns the idempotency key of a directive.
func KeyOf(d *luciusv1.Directive) Key {
	return Key{JobID: d.GetJobId(), StepID: d.GetStepId(), AttemptNo: int(d.GetAttemptNo()), LeaseID: d.GetLeaseId()}
}

func (k Key) String() string {
	return fmt.Sprintf("%s/%s/%d/%s", k.JobID, k.StepID, k.AttemptNo, k.LeaseID)
}

// Limits of the callback contract (lucius.v1.AckRequest / ResultRequest): a
// directive outside them could never be acknowledged, so it is rejected here.
var (
	jobIDPattern = regexp.MustCompile(`^[0-9a-f]{64}$`)
	uuidPattern  = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)
)

const maxStepIDLen = 256

// ErrInvalidDirective wraps every reason ParseDirective and ValidateDirective
// reject a directive for.
var ErrInvalidDirective = errors.New("invalid directive")

// ParseDirective decodes a bus message body (protojson of lucius.v1.Directive,
// unknown fields ignored so newer orchestrators can add fields) and validates
// it with ValidateDirective.
func ParseDirective(body []byte) (*luciusv1.Directive, error) {
	d := &luciusv1.Directive{}
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(body, d); err != nil {
		return nil, fmt.Errorf("%w: body is not a lucius.v1.Directive: %v", ErrInvalidDirective, err)
	}
	if err := ValidateDirective(d); err != nil {
		return nil, err
	}
	return d, nil
}

// ValidateDirective checks that a directive carries what the runner needs: an
// idempotency key the callbacks accept (job_id of 64 lowercase hex digits,
// step_id of 1-256 bytes, attempt_no >= 1, lease_id a UUID), a step_type, a
// workspace_ref and an input_ref the worker can use as local files (both
// input_ref and job_input_ref empty for a job without a document), and a
// gRPC callback target. Every problem is reported, joined.
func ValidateDirective(d *luciusv1.Directive) error {
	if d == nil {
		return fmt.Errorf("%w: nil", ErrInvalidDirective)
	}
	var errs []error
	if !jobIDPattern.MatchString(d.GetJobId()) {
		errs = append(errs, fmt.Errorf("job_id %q: want 64 lowercase hex digits", clip(d.GetJobId())))
	}
	if n := len(d.GetStepId()); n == 0 || n > maxStepIDLen {
		errs = append(errs, fmt.Errorf("step_id: want 1-%d bytes, have %d", maxStepIDLen, n))
	}
	if d.GetAttemptNo() < 1 {
		errs = append(errs, fmt.Errorf("attempt_no %d: want >= 1", d.GetAttemptNo()))
	}
	if !uuidPattern.MatchString(d.GetLeaseId()) {
		errs = append(errs, fmt.Errorf("lease_id %q: want a UUID", clip(d.GetLeaseId())))
	}
	if err := checkStepType(d.GetStepType()); err != nil {
		errs = append(errs, err)
	}
	if d.GetWorkspaceRef() == "" {
		errs = append(errs, errors.New("workspace_ref is empty"))
	} else if _, err := StepRef(d); err != nil {
		errs = append(errs, err)
	}
	// A job without a document (a runbook step) has neither input_ref nor
	// job_input_ref; any other step reads an input.
	documentless := d.GetInputRef() == "" && d.GetJobInputRef() == ""
	if d.GetInputRef() == "" && !documentless {
		errs = append(errs, errors.New("input_ref is empty"))
	}
	if strings.TrimSpace(d.GetCallbackUrls().GetGrpcTarget()) == "" {
		errs = append(errs, errors.New("callback_urls.grpc_target is empty (this worker calls back over gRPC only)"))
	}
	if d.GetFinalStep() && d.GetOutputRef() == "" && !documentless {
		errs = append(errs, errors.New("output_ref is empty on the final step"))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidDirective, err)
	}
	return nil
}

// checkStepType accepts a step type that is safe as one directory name.
func checkStepType(t string) error {
	if t == "" || len(t) > 64 {
		return fmt.Errorf("step_type %q: want 1-64 characters", clip(t))
	}
	for _, c := range t {
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return fmt.Errorf("step_type %q: want letters, digits, '_' or '-'", clip(t))
		}
	}
	return nil
}

// clip shortens a value quoted in an error message.
func clip(s string) string { return blob.Clip(s) }
