// Package sis is the example SIS platform service built on the worker
// skeleton. It answers each prompt of payload.prompt_set with the chunk of
// its input that is most similar (cosine similarity of featurehash vectors),
// writing <workspace>/sis/<attempt>/result.json. Its input is the EMBEDDING
// step's vectors.json or, in a SIS-only protocol, plain text, which it chunks
// and embeds the same way EMBEDDING does.
package sis

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/lucius-platform/lucius/sdk/worker"
	"github.com/lucius-platform/lucius/services/worker-skeleton/examples/featurehash"
)

// Artifact written by the step.
const (
	ArtifactName = "result"
	ArtifactFile = "result.json"
	MediaType    = "application/json"
)

// ExcerptLength is how many characters of the best chunk a match quotes.
const ExcerptLength = 200

// Match is the answer to one prompt.
type Match struct {
	Prompt     string  `json:"prompt"`
	ChunkIndex int     `json:"chunk_index"`
	Score      float64 `json:"score"`
	Excerpt    string  `json:"excerpt"`
}

// Result is the content of result.json.
type Result struct {
	Model      string `json:"model"`
	Dimensions int    `json:"dimensions"`
	// Source is "vectors" (the input was a vectors.json) or "text".
	Source  string  `json:"source"`
	Matches []Match `json:"matches"`
}

// Executor is the SIS step.
type Executor struct{}

var _ worker.Executor = Executor{}

// Execute applies payload.prompt_set (a non-empty list of strings) to the
// input. Ties go to the lowest chunk index; a prompt sharing no token with
// the input scores 0. Output: prompts, chunks, source, best_score and sha256
// of result.json. A missing or empty prompt_set, input that is neither a
// vectors.json nor UTF-8 text, or input without any text is a permanent
// failure.
func (Executor) Execute(ctx context.Context, t *worker.Task) (worker.Result, error) {
	prompts, err := t.PayloadStrings("prompt_set")
	if err != nil {
		return worker.Result{}, fmt.Errorf("sis: %w", err)
	}
	if len(prompts) == 0 {
		return worker.Result{}, worker.PermanentCode(worker.CodeInvalidInput,
			errors.New("sis: payload.prompt_set is missing or empty; it needs at least one prompt"))
	}
	data, err := t.ReadInput(ctx)
	if err != nil {
		return worker.Result{}, fmt.Errorf("sis: %w", err)
	}
	doc, source, err := load(t, data)
	if err != nil {
		return worker.Result{}, err
	}
	if len(doc.Chunks) == 0 {
		return worker.Result{}, worker.PermanentCode(worker.CodeInvalidInput,
			fmt.Errorf("sis: input %s has no text to search", t.Directive.GetInputRef()))
	}
	res := Result{Model: featurehash.Model, Dimensions: doc.Dimensions, Source: source, Matches: Search(doc, prompts)}
	body, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return worker.Result{}, fmt.Errorf("sis: encode result: %w", err)
	}
	ref, err := t.WriteArtifact(ctx, ArtifactName, ArtifactFile, MediaType, append(body, '\n'))
	if err != nil {
		return worker.Result{}, fmt.Errorf("sis: %w", err)
	}
	best := res.Matches[0].Score
	for _, m := range res.Matches[1:] {
		best = max(best, m.Score)
	}
	t.Logger().InfoContext(ctx, "prompts answered", "prompts", len(prompts), "source", source)
	return worker.Result{Output: map[string]any{
		"prompts":    len(prompts),
		"chunks":     len(doc.Chunks),
		"source":     source,
		"best_score": best,
		"sha256":     ref.GetSha256(),
	}}, nil
}

// load reads the input as a vectors.json, or else as text embedded with the
// payload's chunk_size and dimensions.
func load(t *worker.Task, data []byte) (featurehash.Document, string, error) {
	doc, err := featurehash.ParseDocument(data)
	if err == nil {
		return doc, "vectors", nil
	}
	if !errors.Is(err, featurehash.ErrNotDocument) {
		return featurehash.Document{}, "", worker.PermanentCode(worker.CodeInvalidInput, fmt.Errorf("sis: input %s: %w", t.Directive.GetInputRef(), err))
	}
	if !utf8.Valid(data) {
		return featurehash.Document{}, "", worker.PermanentCode(worker.CodeInvalidInput,
			fmt.Errorf("sis: input %s is neither a vectors.json nor UTF-8 text", t.Directive.GetInputRef()))
	}
	chunkSize, err := t.PayloadInt("chunk_size", featurehash.DefaultChunkSize, 1, featurehash.MaxChunkSize)
	if err != nil {
		return featurehash.Document{}, "", fmt.Errorf("sis: %w", err)
	}
	dims, err := t.PayloadInt("dimensions", featurehash.DefaultDimensions, featurehash.MinDimensions, featurehash.MaxDimensions)
	if err != nil {
		return featurehash.Document{}, "", fmt.Errorf("sis: %w", err)
	}
	return featurehash.Embed(string(data), chunkSize, dims), "text", nil
}

// Search answers every prompt with the most similar chunk of doc, which must
// have at least one chunk.
func Search(doc featurehash.Document, prompts []string) []Match {
	out := make([]Match, 0, len(prompts))
	for _, p := range prompts {
		q := featurehash.Vector(p, doc.Dimensions)
		best, bestScore := 0, featurehash.Cosine(q, doc.Chunks[0].Vector)
		for i, c := range doc.Chunks[1:] {
			if s := featurehash.Cosine(q, c.Vector); s > bestScore {
				best, bestScore = i+1, s
			}
		}
		out = append(out, Match{Prompt: p, ChunkIndex: doc.Chunks[best].Index, Score: bestScore, Excerpt: excerpt(doc.Chunks[best].Text)})
	}
	return out
}

func excerpt(s string) string {
	if utf8.RuneCountInString(s) <= ExcerptLength {
		return s
	}
	return string([]rune(s)[:ExcerptLength]) + "…"
}
