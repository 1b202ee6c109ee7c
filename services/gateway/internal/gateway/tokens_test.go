package gateway

import (
	"slices"
	"testing"
	"unicode/utf8"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestIDTokens(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		token  string
		minID  int64
		want   int64
		reject bool
	}{
		{"none", "", 1, 0, false},
		{"round trip", encodeIDToken(42), 1, 42, false},
		{"zero allowed", encodeIDToken(0), 0, 0, false},
		{"below the minimum", encodeIDToken(0), 1, 0, true},
		{"negative", encodeIDToken(-3), 0, 0, true},
		{"not base64", "!!", 0, 0, true},
		{"not a number", encodeToken("twelve"), 0, 0, true},
		{"not a string", encodeToken(12), 0, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := decodeIDToken(tt.token, tt.minID)
			if tt.reject {
				if status.Code(err) != codes.InvalidArgument {
					t.Fatalf("decodeIDToken(%q) = %d, %v; want InvalidArgument", tt.token, got, err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("decodeIDToken(%q) = %d, %v; want %d", tt.token, got, err, tt.want)
			}
		})
	}
}

// Any token decodes to an id at or above the minimum or is refused as
// InvalidArgument, and every id the API encodes decodes back to itself.
func FuzzIDToken(f *testing.F) {
	f.Add("", int64(7))
	f.Add(encodeIDToken(7), int64(7))
	f.Add("MTI", int64(-1))
	f.Fuzz(func(t *testing.T, token string, id int64) {
		got, err := decodeIDToken(token, 1)
		switch {
		case err != nil && status.Code(err) != codes.InvalidArgument:
			t.Fatalf("decodeIDToken(%q): %v", token, err)
		case err == nil && token != "" && got < 1:
			t.Fatalf("decodeIDToken(%q) = %d, below the minimum", token, got)
		}
		if id >= 0 {
			if back, err := decodeIDToken(encodeIDToken(id), 0); err != nil || back != id {
				t.Fatalf("round trip of %d: %d, %v", id, back, err)
			}
		}
	})
}

func TestCutPage(t *testing.T) {
	key := func(s string) string { return encodeToken(s) }
	tests := []struct {
		name      string
		list      []string
		size      int
		want      []string
		wantToken string
	}{
		{"empty", nil, 2, nil, ""},
		{"a short last page", []string{"a"}, 2, []string{"a"}, ""},
		{"exactly a page is the last", []string{"a", "b"}, 2, []string{"a", "b"}, ""},
		{"one more row means another page", []string{"a", "b", "c"}, 2, []string{"a", "b"}, key("b")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, token := cutPage(tc.list, tc.size, key)
			if !slices.Equal(got, tc.want) || token != tc.wantToken {
				t.Fatalf("cutPage = %v, %q; want %v, %q", got, token, tc.want, tc.wantToken)
			}
		})
	}
}

func TestPageTokensRoundTripAndRefuseForeignOnes(t *testing.T) {
	after, err := decodeKeyToken(encodeToken("contoso"))
	if err != nil || after != "contoso" {
		t.Fatalf("key token: %q, %v", after, err)
	}
	if after, err := decodeKeyToken(""); err != nil || after != "" {
		t.Fatalf("first page: %q, %v", after, err)
	}
	type cursor struct{ Name string }
	valid := func(c cursor) bool { return c.Name != "" }
	c, ok, err := decodeCursor(encodeToken(cursor{Name: "x"}), valid)
	if err != nil || !ok || c.Name != "x" {
		t.Fatalf("cursor token: %+v, %v, %v", c, ok, err)
	}
	if _, ok, err := decodeCursor("", valid); ok || err != nil {
		t.Fatalf("first page: %v, %v", ok, err)
	}
	id, err := decodeIDToken(encodeIDToken(42), 1)
	if err != nil || id != 42 {
		t.Fatalf("id token: %d, %v", id, err)
	}
	for name, decode := range map[string]func(string) error{
		"key":    func(tok string) error { _, err := decodeKeyToken(tok); return err },
		"cursor": func(tok string) error { _, _, err := decodeCursor(tok, valid); return err },
		"id":     func(tok string) error { _, err := decodeIDToken(tok, 1); return err },
	} {
		for _, tok := range []string{"not base64!", encodeToken(""), encodeToken(cursor{}), encodeToken(map[string]int{"a": 1}), encodeIDToken(0)} {
			if name == "key" && tok == encodeIDToken(0) {
				continue // "0" is a valid key
			}
			err := decode(tok)
			if status.Code(err) != codes.InvalidArgument {
				t.Errorf("%s token %q: %v, want INVALID_ARGUMENT", name, tok, err)
			}
		}
	}
}

func FuzzKeyToken(f *testing.F) {
	f.Add("")
	f.Add(encodeToken("contoso"))
	f.Add(encodeToken(""))
	f.Add("bm90IGpzb24")
	f.Fuzz(func(t *testing.T, token string) {
		key, err := decodeKeyToken(token)
		switch {
		case err != nil && status.Code(err) != codes.InvalidArgument:
			t.Fatalf("decodeKeyToken(%q): %v", token, err)
		case err == nil && token != "" && key == "":
			t.Fatalf("decodeKeyToken(%q) accepted an empty key", token)
		}
		// Keys are the store's text (tenant ids, names): valid UTF-8, which
		// JSON carries unchanged.
		if token != "" && utf8.ValidString(token) {
			if back, err := decodeKeyToken(encodeToken(token)); err != nil || back != token {
				t.Fatalf("round trip of %q: %q, %v", token, back, err)
			}
		}
	})
}
