// Package ocr is the example OCR platform service built on the worker
// skeleton. Its placeholder "recognition" treats the input as UTF-8 text and
// writes it unchanged to <workspace>/ocr/<attempt>/output.txt, so the whole
// lifecycle (ACK, artifact, RESULT, hand-over to EMBEDDING) is real and
// checkable. A real OCR team replaces Execute's body and keeps the rest.
package ocr

import (
	"context"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/lucius-platform/lucius/sdk/worker"
)

// Artifact written by the step.
const (
	ArtifactName = "text"
	ArtifactFile = "output.txt"
	MediaType    = "text/plain; charset=utf-8"
)

// Executor is the OCR step.
type Executor struct{}

var _ worker.Executor = Executor{}

// Execute copies the UTF-8 text of input_ref to output.txt. Output:
// characters, lines, bytes and sha256 of the text. Input that is not UTF-8 is
// a permanent failure.
func (Executor) Execute(ctx context.Context, t *worker.Task) (worker.Result, error) {
	data, err := t.ReadInput(ctx)
	if err != nil {
		return worker.Result{}, fmt.Errorf("ocr: %w", err)
	}
	if !utf8.Valid(data) {
		return worker.Result{}, worker.PermanentCode(worker.CodeInvalidInput,
			fmt.Errorf("ocr: input %s is not UTF-8 text (first invalid byte at offset %d)", t.Directive.GetInputRef(), invalidOffset(data)))
	}
	ref, err := t.WriteArtifact(ctx, ArtifactName, ArtifactFile, MediaType, data)
	if err != nil {
		return worker.Result{}, fmt.Errorf("ocr: %w", err)
	}
	text := string(data)
	t.Logger().InfoContext(ctx, "text extracted", "characters", utf8.RuneCountInString(text), "bytes", len(data))
	return worker.Result{Output: map[string]any{
		"characters": utf8.RuneCountInString(text),
		"lines":      CountLines(text),
		"bytes":      len(data),
		"sha256":     ref.GetSha256(),
	}}, nil
}

// CountLines counts lines: newline-terminated ones plus a final unterminated
// one. Empty text has none.
func CountLines(text string) int {
	n := strings.Count(text, "\n")
	if text != "" && !strings.HasSuffix(text, "\n") {
		n++
	}
	return n
}

// invalidOffset is the offset of the first byte that breaks UTF-8.
func invalidOffset(data []byte) int {
	for i := 0; i < len(data); {
		r, size := utf8.DecodeRune(data[i:])
		if r == utf8.RuneError && size == 1 {
			return i
		}
		i += size
	}
	return len(data)
}
