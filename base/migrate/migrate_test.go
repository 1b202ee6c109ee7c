package migrate

import (
	"strings"
	"testing"
	"testing/fstest"
)

// both is a migration with its two goose sections.
var both = &fstest.MapFile{Data: []byte("-- +goose Up\nSELECT 1;\n-- +goose Down\nSELECT 1;\n")}

func TestLoadRejectsBadNamesAndGaps(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		files   fstest.MapFS
		wantErr string
	}{
		{"ordered", fstest.MapFS{"0001_a.sql": both, "0002_b.sql": both}, ""},
		{"gap", fstest.MapFS{"0001_a.sql": both, "0003_c.sql": both}, "expected version 2"},
		{"bad name", fstest.MapFS{"1_a.sql": both}, "must match"},
		{"not starting at one", fstest.MapFS{"0002_b.sql": both}, "expected version 1"},
		{"other files ignored", fstest.MapFS{"0001_a.sql": both, "README.md": {}}, ""},
		{"no down section", fstest.MapFS{"0001_a.sql": {Data: []byte("-- +goose Up\nCREATE TABLE a (id int);\n")}}, `no "-- +goose Down" section`},
		{"no up section", fstest.MapFS{"0001_a.sql": {Data: []byte("CREATE TABLE a (id int);\n")}}, `no "-- +goose Up" section`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := Set{Component: "x", FS: tt.files}.Load()
			if tt.wantErr == "" && err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("error %v, want it to contain %q", err, tt.wantErr)
			}
		})
	}
}
