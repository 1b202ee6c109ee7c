package braces

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

// collect runs Pieces to the end: the pieces before the error, and the error.
func collect(s string, mode Mode) ([]Piece, error) {
	var out []Piece
	for p, err := range Pieces(s, mode) {
		if err != nil {
			return out, err
		}
		out = append(out, p)
	}
	return out, nil
}

func text(s string) Piece { return Piece{Text: s} }
func ref(s string) Piece  { return Piece{Text: s, IsRef: true} }

func TestPiecesSplitsTextAndReferences(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in string
		want     []Piece
	}{
		{"empty", "", nil},
		{"plain text", "no templates", []Piece{text("no templates")}},
		{"one reference", "{{ email }}", []Piece{ref("email")}},
		{"spaces optional", "{{email}}", []Piece{ref("email")}},
		{"surrounding spaces trimmed, inner kept", "{{ \t a | b \n}}", []Piece{ref("a | b")}},
		{"text around references", "to {{ a }} and {{b}}.", []Piece{text("to "), ref("a"), text(" and "), ref("b"), text(".")}},
		{"adjacent references", "{{a}}{{b}}", []Piece{ref("a"), ref("b")}},
		{"empty expression", "{{ }}", []Piece{ref("")}},
		{"the first }} closes", "{{ {{ a }}x", []Piece{ref("{{ a"), text("x")}},
		{"single braces are text", "{ a } {x}", []Piece{text("{ a } {x}")}},
		{"paths are the language's", "{{ nodes.a.output[0] }}", []Piece{ref("nodes.a.output[0]")}},
	}
	for _, tt := range tests {
		for _, mode := range []Mode{Strict, TrailingOnly} {
			got, err := collect(tt.in, mode)
			if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Errorf("%s: Pieces(%q, %d) = %+v, %v; want %+v", tt.name, tt.in, mode, got, err, tt.want)
			}
		}
	}
}

// refused are inputs Pieces refuses in a mode, with the pieces it yields
// before the error.
var refused = []struct {
	in     string
	mode   Mode
	before []Piece
	want   error
}{
	{"{{ email", Strict, nil, ErrNotClosed},
	{"{{ email", TrailingOnly, nil, ErrNotClosed},
	{"a {{ b }} {{ c", Strict, []Piece{text("a "), ref("b")}, ErrNotClosed},
	{"email }}", Strict, nil, ErrCloseAlone},
	{"email }}", TrailingOnly, nil, ErrCloseAlone},
	{"{{ email }} }}", Strict, []Piece{ref("email")}, ErrCloseAlone},
	{"{{ email }} }}", TrailingOnly, []Piece{ref("email")}, ErrCloseAlone},
	{"{{ {{ a }} }}x", Strict, []Piece{ref("{{ a")}, ErrCloseAlone},
	{"}} {{ email }}", Strict, nil, ErrCloseAlone},
	// Strict finds a lone }} before it looks for the reference's end.
	{"}} {{ email", Strict, nil, ErrCloseAlone},
	{"}} {{ email", TrailingOnly, nil, ErrNotClosed},
}

func TestPiecesReportsSyntaxErrorsWhereTheyStand(t *testing.T) {
	t.Parallel()
	for _, tt := range refused {
		got, err := collect(tt.in, tt.mode)
		if !errors.Is(err, tt.want) || !reflect.DeepEqual(got, tt.before) {
			t.Errorf("Pieces(%q, %d) = %+v, %v; want %+v, %v", tt.in, tt.mode, got, err, tt.before, tt.want)
		}
	}
}

func TestTrailingOnlyReadsALoneCloseBeforeAReferenceAsText(t *testing.T) {
	t.Parallel()
	got, err := collect("a }} {{ x }}", TrailingOnly)
	if want := []Piece{text("a }} "), ref("x")}; err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("Pieces = %+v, %v; want %+v", got, err, want)
	}
}

func TestPiecesStopsWhenTheCallerDoes(t *testing.T) {
	t.Parallel()
	n := 0
	for range Pieces("a {{ b }} c {{ d", Strict) {
		if n++; n == 2 {
			break
		}
	}
	if n != 2 {
		t.Fatalf("the loop ran %d times, want 2", n)
	}
}

// FuzzPieces: Pieces never panics; what it accepts has no empty text,
// expressions without surrounding spaces or braces that close, text without a
// "{{" (nor a "}}" in Strict), and written back with {{ }} splits the same.
// What Strict accepts, TrailingOnly accepts alike.
func FuzzPieces(f *testing.F) {
	for _, s := range []string{"to {{ a }} and {{b}}.", "}}{{", "a }} {{ x }}", "{{ {{ a }} }}", "{{", "{{}}", "x}}"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, mode := range []Mode{Strict, TrailingOnly} {
			pieces, err := collect(s, mode)
			if err != nil {
				if !errors.Is(err, ErrNotClosed) && !errors.Is(err, ErrCloseAlone) {
					t.Fatalf("Pieces(%q, %d): unexpected error %v", s, mode, err)
				}
				continue
			}
			var b strings.Builder
			for _, p := range pieces {
				switch {
				case p.IsRef:
					if p.Text != strings.TrimSpace(p.Text) || strings.Contains(p.Text, "}}") {
						t.Fatalf("Pieces(%q, %d): expression %q", s, mode, p.Text)
					}
					b.WriteString("{{ " + p.Text + " }}") // spaces keep a brace in the expression from joining a delimiter
				case p.Text == "" || strings.Contains(p.Text, "{{") || mode == Strict && strings.Contains(p.Text, "}}"):
					t.Fatalf("Pieces(%q, %d): text %q", s, mode, p.Text)
				default:
					b.WriteString(p.Text)
				}
			}
			again, err := collect(b.String(), mode)
			if err != nil || !reflect.DeepEqual(again, pieces) {
				t.Fatalf("Pieces(%q, %d) = %+v; written back as %q it splits into %+v, %v", s, mode, pieces, b.String(), again, err)
			}
			if mode == Strict {
				lenient, err := collect(s, TrailingOnly)
				if err != nil || !reflect.DeepEqual(lenient, pieces) {
					t.Fatalf("Pieces(%q): Strict %+v, TrailingOnly %+v, %v", s, pieces, lenient, err)
				}
			}
		}
	})
}
