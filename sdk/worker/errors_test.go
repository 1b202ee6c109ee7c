package worker_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
	"github.com/lucius-platform/lucius/sdk/worker"
)

func TestClassify(t *testing.T) {
	t.Parallel()
	base := errors.New("disk on fire")
	for _, tc := range []struct {
		name       string
		err        error
		wantClass  luciusv1.FailureClass
		wantReason string
	}{
		{"nil", nil, luciusv1.FailureClass_FAILURE_CLASS_UNSPECIFIED, ""},
		{"unclassified is retryable", base, luciusv1.FailureClass_FAILURE_CLASS_RETRYABLE, "UNCLASSIFIED: disk on fire"},
		{"permanent", worker.Permanent(base), luciusv1.FailureClass_FAILURE_CLASS_NON_RETRYABLE, "PERMANENT: disk on fire"},
		{"retryable", worker.Retryable(base), luciusv1.FailureClass_FAILURE_CLASS_RETRYABLE, "TRANSIENT: disk on fire"},
		{"permanentf", worker.Permanentf("page %d unreadable", 3), luciusv1.FailureClass_FAILURE_CLASS_NON_RETRYABLE, "INVALID_INPUT: page 3 unreadable"},
		{"code kept through wrapping", fmt.Errorf("ocr page 2: %w", worker.PermanentCode(worker.CodeInputNotFound, base)),
			luciusv1.FailureClass_FAILURE_CLASS_NON_RETRYABLE, "INPUT_NOT_FOUND: ocr page 2: disk on fire"},
		{"outermost classification wins", worker.Retryable(worker.Permanent(base)), luciusv1.FailureClass_FAILURE_CLASS_RETRYABLE, "TRANSIENT: disk on fire"},
		{"deadline is a retryable timeout", fmt.Errorf("call model: %w", context.DeadlineExceeded),
			luciusv1.FailureClass_FAILURE_CLASS_RETRYABLE, "TIMEOUT: call model: context deadline exceeded"},
		{"joined errors", errors.Join(errors.New("a"), worker.Permanent(errors.New("b"))), luciusv1.FailureClass_FAILURE_CLASS_NON_RETRYABLE, "PERMANENT: a\nb"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			class, reason := worker.Classify(tc.err)
			if class != tc.wantClass || reason != tc.wantReason {
				t.Errorf("Classify = %v, %q; want %v, %q", class, reason, tc.wantClass, tc.wantReason)
			}
			if got := worker.IsPermanent(tc.err); got != (tc.wantClass == luciusv1.FailureClass_FAILURE_CLASS_NON_RETRYABLE) {
				t.Errorf("IsPermanent = %v", got)
			}
		})
	}
}

func TestClassifyKeepsErrorChainAndNil(t *testing.T) {
	t.Parallel()
	sentinel := errors.New("sentinel")
	if !errors.Is(worker.Permanent(fmt.Errorf("ctx: %w", sentinel)), sentinel) {
		t.Error("Permanent hides the wrapped error from errors.Is")
	}
	if worker.Permanent(nil) != nil || worker.Retryable(nil) != nil {
		t.Error("classifying nil must stay nil")
	}
}

func TestClassifyTruncatesLongReasonsOnRuneBoundary(t *testing.T) {
	t.Parallel()
	_, reason := worker.Classify(worker.Permanent(errors.New(strings.Repeat("é", 5000))))
	if len(reason) > 4096 || len(reason) < 4090 || !strings.HasPrefix(reason, "PERMANENT: é") || !utf8.ValidString(reason) {
		t.Errorf("reason of %d bytes (valid UTF-8: %v), want at most 4096 bytes cut on a character boundary", len(reason), utf8.ValidString(reason))
	}
}
