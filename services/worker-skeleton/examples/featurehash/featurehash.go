// Package featurehash is the placeholder embedding model the EMBEDDING and
// SIS examples share: deterministic feature hashing of word tokens, chunking
// on word boundaries, cosine similarity, and the vectors.json document format.
// It has no model weights; the same text always gives byte-identical output.
//
// A token is a maximal run of Unicode letters and digits, lowercased. Its
// 64-bit FNV-1a hash picks a bucket (hash mod dimensions) and a sign (the
// hash's top bit: 0 adds, 1 subtracts), the signed trick that keeps hashing
// collisions from biasing the dot product. The vector is then L2-normalized,
// so cosine similarity is the dot product.
package featurehash

import (
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"strings"
	"unicode"
)

// Model names the algorithm in documents, so a reader can refuse vectors
// made by something else.
const Model = "featurehash-fnv1a64-v1"

// Defaults and limits of the payload fields (as in the protocols' payload
// rules: chunk_size 1..1,000,000, dimensions 2..4096).
const (
	DefaultChunkSize  = 200
	DefaultDimensions = 64
	MaxChunkSize      = 1_000_000
	MinDimensions     = 2
	MaxDimensions     = 4096
)

// Tokens splits text into lowercased word tokens.
func Tokens(text string) []string {
	return strings.FieldsFunc(strings.ToLower(text), func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r)
	})
}

// Vector embeds text into dims dimensions. Text without tokens gives the
// zero vector.
func Vector(text string, dims int) []float64 {
	v := make([]float64, dims)
	for _, tok := range Tokens(text) {
		h := fnv.New64a()
		h.Write([]byte(tok))
		sum := h.Sum64()
		if sum>>63 == 1 {
			v[sum%uint64(dims)]--
		} else {
			v[sum%uint64(dims)]++
		}
	}
	var norm float64
	for _, x := range v {
		norm += float64(x * x) // explicit conversion: no fused multiply-add, same bits on every platform
	}
	if norm == 0 {
		return v
	}
	norm = math.Sqrt(norm)
	for i := range v {
		v[i] /= norm
	}
	return v
}

// Cosine is the cosine similarity of a and b (0 when either is zero or their
// lengths differ).
func Cosine(a, b []float64) float64 {
	if len(a) != len(b) {
		return 0
	}
	var dot, na, nb float64
	for i := range a {
		dot += float64(a[i] * b[i])
		na += float64(a[i] * a[i])
		nb += float64(b[i] * b[i])
	}
	if na == 0 || nb == 0 {
		return 0
	}
	return dot / (math.Sqrt(na) * math.Sqrt(nb))
}

// Chunks splits text into pieces of at most size characters (runes), each
// cut at the last whitespace before the limit where there is one, and hard
// at the limit inside a longer word. Chunks are verbatim substrings with
// surrounding whitespace trimmed; whitespace-only text gives none.
func Chunks(text string, size int) []string {
	if size < 1 {
		size = 1
	}
	runes := []rune(text)
	var out []string
	start := 0
	for {
		for start < len(runes) && unicode.IsSpace(runes[start]) {
			start++
		}
		if start >= len(runes) {
			return out
		}
		end := min(start+size, len(runes))
		if end < len(runes) && !unicode.IsSpace(runes[end]) {
			// Back up to the last whitespace inside the window, if any.
			for i := end - 1; i > start; i-- {
				if unicode.IsSpace(runes[i]) {
					end = i
					break
				}
			}
		}
		out = append(out, strings.TrimRightFunc(string(runes[start:end]), unicode.IsSpace))
		start = end
	}
}

// Chunk is one embedded piece of a document.
type Chunk struct {
	Index  int       `json:"index"`
	Text   string    `json:"text"`
	Vector []float64 `json:"vector"`
}

// Document is the content of vectors.json.
type Document struct {
	Model      string  `json:"model"`
	Dimensions int     `json:"dimensions"`
	ChunkSize  int     `json:"chunk_size"`
	Chunks     []Chunk `json:"chunks"`
}

// Embed chunks text and embeds every chunk.
func Embed(text string, chunkSize, dims int) Document {
	doc := Document{Model: Model, Dimensions: dims, ChunkSize: chunkSize, Chunks: []Chunk{}}
	for i, c := range Chunks(text, chunkSize) {
		doc.Chunks = append(doc.Chunks, Chunk{Index: i, Text: c, Vector: Vector(c, dims)})
	}
	return doc
}

// Marshal encodes a document deterministically (fixed field order, Go's
// shortest float formatting), indented, with a trailing newline.
func (d Document) Marshal() ([]byte, error) {
	b, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode %s document: %w", Model, err)
	}
	return append(b, '\n'), nil
}

// ErrNotDocument means the bytes are not a vectors.json of this model at all
// (not JSON, or another model): a reader may treat them as plain text.
var ErrNotDocument = errors.New("not a " + Model + " document")

// ParseDocument decodes a vectors.json. It fails with ErrNotDocument when the
// bytes are not this model's document, and with another error when they claim
// to be one but are inconsistent (dimensions out of range, a vector of the
// wrong length).
func ParseDocument(data []byte) (Document, error) {
	var doc Document
	if err := json.Unmarshal(data, &doc); err != nil {
		return Document{}, fmt.Errorf("%w: %v", ErrNotDocument, err)
	}
	if doc.Model != Model {
		return Document{}, fmt.Errorf("%w: model %q", ErrNotDocument, doc.Model)
	}
	if doc.Dimensions < MinDimensions || doc.Dimensions > MaxDimensions {
		return Document{}, fmt.Errorf("corrupt %s document: dimensions %d outside [%d, %d]", Model, doc.Dimensions, MinDimensions, MaxDimensions)
	}
	for i, c := range doc.Chunks {
		if len(c.Vector) != doc.Dimensions {
			return Document{}, fmt.Errorf("corrupt %s document: chunk %d has %d dimensions, want %d", Model, i, len(c.Vector), doc.Dimensions)
		}
	}
	return doc, nil
}
