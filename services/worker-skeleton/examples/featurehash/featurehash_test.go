package featurehash_test

import (
	"bytes"
	"errors"
	"math"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/lucius-platform/lucius/services/worker-skeleton/examples/featurehash"
)

func TestTokens(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		text string
		want string
	}{
		{"Hello, World!", "hello|world"},
		{"  ", ""},
		{"state-of-the-art v2.0", "state|of|the|art|v2|0"},
		{"Ünïcode ÇAFÉ 東京", "ünïcode|çafé|東京"},
		{"tab\tnew\nline", "tab|new|line"},
	} {
		if got := strings.Join(featurehash.Tokens(tc.text), "|"); got != tc.want {
			t.Errorf("Tokens(%q) = %q, want %q", tc.text, got, tc.want)
		}
	}
}

func TestChunks(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		text string
		size int
		want []string
	}{
		{"fits", "one two", 10, []string{"one two"}},
		{"word boundary", "alpha beta gamma delta", 11, []string{"alpha beta", "gamma delta"}},
		{"boundary exactly at limit", "abcde fghij", 5, []string{"abcde", "fghij"}},
		{"long word cut hard", "abcdefghij kl", 4, []string{"abcd", "efgh", "ij", "kl"}},
		{"whitespace only", " \n\t ", 5, nil},
		{"empty", "", 5, nil},
		{"leading and trailing space", "  a b  ", 3, []string{"a b"}},
		{"multibyte counted as characters", "ééé ééé", 3, []string{"ééé", "ééé"}},
		{"newlines are boundaries", "line one\nline two", 9, []string{"line one", "line two"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := featurehash.Chunks(tc.text, tc.size)
			if strings.Join(got, "|") != strings.Join(tc.want, "|") || len(got) != len(tc.want) {
				t.Errorf("Chunks(%q, %d) = %q, want %q", tc.text, tc.size, got, tc.want)
			}
			for _, c := range got {
				if n := utf8.RuneCountInString(c); n > tc.size || !strings.Contains(tc.text, c) {
					t.Errorf("chunk %q: %d characters, verbatim %v", c, n, strings.Contains(tc.text, c))
				}
			}
		})
	}
}

func TestVectorIsDeterministicNormalizedAndSigned(t *testing.T) {
	t.Parallel()
	a := featurehash.Vector("The quick brown fox jumps over the lazy dog", 64)
	b := featurehash.Vector("the QUICK brown fox, jumps over the lazy dog!", 64)
	if len(a) != 64 {
		t.Fatalf("len = %d", len(a))
	}
	var norm float64
	var negative bool
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("case and punctuation changed the vector at %d", i)
		}
		norm += a[i] * a[i]
		negative = negative || a[i] < 0
	}
	if math.Abs(norm-1) > 1e-12 {
		t.Errorf("squared norm = %v, want 1", norm)
	}
	if !negative {
		t.Error("no negative component: signs are not hashed")
	}
	for _, x := range featurehash.Vector("...", 8) {
		if x != 0 {
			t.Fatal("text without tokens must give the zero vector")
		}
	}
}

// TestVectorGolden pins the algorithm: FNV-1a 64 of "hello" is
// 0xa430d84680aabd0b, so bucket 0xa430d84680aabd0b % 8 = 3 with sign -1 (top
// bit set). Changing the hashing breaks every stored vectors.json.
func TestVectorGolden(t *testing.T) {
	t.Parallel()
	got := featurehash.Vector("hello", 8)
	want := []float64{0, 0, 0, -1, 0, 0, 0, 0}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("Vector(hello, 8) = %v, want %v", got, want)
		}
	}
}

func TestCosine(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		a, b []float64
		want float64
	}{
		{"same", []float64{1, 2}, []float64{1, 2}, 1},
		{"opposite", []float64{1, 0}, []float64{-1, 0}, -1},
		{"orthogonal", []float64{1, 0}, []float64{0, 3}, 0},
		{"zero", []float64{0, 0}, []float64{1, 1}, 0},
		{"length mismatch", []float64{1}, []float64{1, 1}, 0},
	} {
		if got := featurehash.Cosine(tc.a, tc.b); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("%s: Cosine = %v, want %v", tc.name, got, tc.want)
		}
	}
	text := featurehash.Vector("invoice total amount due", 64)
	if featurehash.Cosine(featurehash.Vector("amount due", 64), text) <= featurehash.Cosine(featurehash.Vector("weather forecast", 64), text) {
		t.Error("a prompt sharing words is not more similar than one sharing none")
	}
}

func TestDocumentMarshalIsByteIdenticalAndParses(t *testing.T) {
	t.Parallel()
	text := strings.Repeat("Lucius orchestrates multi-step work across services. ", 20)
	first, err := featurehash.Embed(text, 50, 16).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	second, _ := featurehash.Embed(text, 50, 16).Marshal()
	if !bytes.Equal(first, second) {
		t.Fatal("the same input gave different bytes")
	}
	doc, err := featurehash.ParseDocument(first)
	if err != nil {
		t.Fatal(err)
	}
	if doc.Dimensions != 16 || doc.ChunkSize != 50 || len(doc.Chunks) < 20 || doc.Chunks[3].Index != 3 {
		t.Errorf("parsed document: dims %d, chunk size %d, %d chunks", doc.Dimensions, doc.ChunkSize, len(doc.Chunks))
	}
	again, _ := doc.Marshal()
	if !bytes.Equal(first, again) {
		t.Error("parse and marshal changed the bytes")
	}
}

func TestParseDocumentTellsTextFromCorruption(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		data        string
		notDocument bool
	}{
		{"plain text", "just some words", true},
		{"other json", `{"model":"openai"}`, true},
		{"bad dimensions", `{"model":"` + featurehash.Model + `","dimensions":1,"chunks":[]}`, false},
		{"short vector", `{"model":"` + featurehash.Model + `","dimensions":2,"chunks":[{"index":0,"text":"a","vector":[1]}]}`, false},
	} {
		_, err := featurehash.ParseDocument([]byte(tc.data))
		if err == nil || errors.Is(err, featurehash.ErrNotDocument) != tc.notDocument {
			t.Errorf("%s: err = %v, not-a-document %v", tc.name, err, tc.notDocument)
		}
	}
}
