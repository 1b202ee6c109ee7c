package gateway

import (
	"testing"

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
