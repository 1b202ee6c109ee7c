package migrate

import (
	"strings"
	"testing"
	"testing/fstest"
)

func TestLoadRejectsBadNamesAndGaps(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		files   fstest.MapFS
		wantErr string
	}{
		{"ordered", fstest.MapFS{"0001_a.sql": {}, "0002_b.sql": {}}, ""},
		{"gap", fstest.MapFS{"0001_a.sql": {}, "0003_c.sql": {}}, "expected version 2"},
		{"bad name", fstest.MapFS{"1_a.sql": {}}, "must match"},
		{"not starting at one", fstest.MapFS{"0002_b.sql": {}}, "expected version 1"},
		{"other files ignored", fstest.MapFS{"0001_a.sql": {}, "README.md": {}}, ""},
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
