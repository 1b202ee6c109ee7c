// Package embedding is the example EMBEDDING platform service built on the
// worker skeleton. It splits its input text (the OCR step's output.txt, or
// the job's input in an EMBEDDING-first protocol) into chunks on word
// boundaries and embeds each with the deterministic feature-hashing model of
// package featurehash, writing <workspace>/embedding/<attempt>/vectors.json.
package embedding

import (
	"context"
	"fmt"
	"unicode/utf8"

	"github.com/lucius-platform/lucius/sdk/worker"
	"github.com/lucius-platform/lucius/services/worker-skeleton/examples/featurehash"
)

// Artifact written by the step.
const (
	ArtifactName = "vectors"
	ArtifactFile = "vectors.json"
	MediaType    = "application/json"
)

// Executor is the EMBEDDING step.
type Executor struct{}

var _ worker.Executor = Executor{}

// Execute embeds input_ref. Payload: chunk_size (characters per chunk,
// default 200) and dimensions (vector length, default 64). Output: chunks,
// tokens, chunk_size, dimensions and sha256 of vectors.json. Input that is not
// UTF-8 or payload values out of range are permanent failures.
func (Executor) Execute(ctx context.Context, t *worker.Task) (worker.Result, error) {
	chunkSize, err := t.PayloadInt("chunk_size", featurehash.DefaultChunkSize, 1, featurehash.MaxChunkSize)
	if err != nil {
		return worker.Result{}, fmt.Errorf("embedding: %w", err)
	}
	dims, err := t.PayloadInt("dimensions", featurehash.DefaultDimensions, featurehash.MinDimensions, featurehash.MaxDimensions)
	if err != nil {
		return worker.Result{}, fmt.Errorf("embedding: %w", err)
	}
	data, err := t.ReadInput(ctx)
	if err != nil {
		return worker.Result{}, fmt.Errorf("embedding: %w", err)
	}
	if !utf8.Valid(data) {
		return worker.Result{}, worker.PermanentCode(worker.CodeInvalidInput,
			fmt.Errorf("embedding: input %s is not UTF-8 text", t.Directive.GetInputRef()))
	}
	text := string(data)
	doc := featurehash.Embed(text, chunkSize, dims)
	body, err := doc.Marshal()
	if err != nil {
		return worker.Result{}, fmt.Errorf("embedding: %w", err)
	}
	ref, err := t.WriteArtifact(ctx, ArtifactName, ArtifactFile, MediaType, body)
	if err != nil {
		return worker.Result{}, fmt.Errorf("embedding: %w", err)
	}
	t.Logger().InfoContext(ctx, "text embedded", "chunks", len(doc.Chunks), "dimensions", dims)
	return worker.Result{Output: map[string]any{
		"chunks":     len(doc.Chunks),
		"tokens":     len(featurehash.Tokens(text)),
		"chunk_size": chunkSize,
		"dimensions": dims,
		"sha256":     ref.GetSha256(),
	}}, nil
}
