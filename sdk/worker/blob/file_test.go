package blob

import "testing"

func TestLocalPath(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		ref, want string
		wantErr   bool
	}{
		{"file:///ws/a/b.txt", "/ws/a/b.txt", false},
		{"file://localhost/ws/a/", "/ws/a", false},
		{"file:///ws/acme%20corp/x", "/ws/acme corp/x", false},
		{"file:///ws/a%2Fb/x", "/ws/a%2Fb/x", false}, // an escaped slash stays inside its segment
		{"/plain/acme%20corp/x", "/plain/acme%20corp/x", false},
		{"file:///ws/./a//b", "/ws/a/b", false},
		{"file:///ws/../etc/passwd", "", true},
		{"file:///ws/%2E%2E/x", "", true},
		{"/ws/../x", "", true},
		{"file://server/share/x", "", true},
		{"file:relative", "", true},
		{"https://example.com/x", "", true},
		{"az://container/blob", "", true},
		{"relative/x", "", true},
		{"file:///ws/%zz", "", true},
		{"/ws/nul\x00", "", true},
	} {
		got, err := LocalPath(tc.ref)
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("LocalPath(%q) = %q, %v; want %q (error %v)", tc.ref, got, err, tc.want, tc.wantErr)
		}
		if err != nil && CodeOf(err) != CodeUnsupportedRef {
			t.Errorf("LocalPath(%q) error is not UNSUPPORTED_REF: %v", tc.ref, err)
		}
	}
}

func TestFileURIRoundTrips(t *testing.T) {
	t.Parallel()
	for _, p := range []string{"/ws/a b/c.txt", "/ws/a%2Fb/#x?.txt", "/ws/ünï/ç"} {
		got, err := LocalPath(FileURI(p))
		if err != nil || got != p {
			t.Errorf("LocalPath(FileURI(%q)) = %q, %v", p, got, err)
		}
	}
}

func TestJoinRefPutsTheFileInsideAFolderRef(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ ref, base, want string }{
		{"file:///out/result.txt", "output.txt", "file:///out/result.txt"},
		{"file:///out/job-1/", "output.txt", "file:///out/job-1/output.txt"},
		{"/out/dir/", "output.txt", "/out/dir/output.txt"},
		{"az://acct/results/job-1/", "a#b?c%.txt", "az://acct/results/job-1/a%23b%3Fc%25.txt"},
		{"az://acct/results/out.json", "result.json", "az://acct/results/out.json"},
	} {
		if got := JoinRef(tc.ref, tc.base); got != tc.want {
			t.Errorf("JoinRef(%q, %q) = %q; want %q", tc.ref, tc.base, got, tc.want)
		}
	}
	// A joined file ref still names the file inside the folder.
	if p, err := LocalPath(JoinRef("file:///out/dir/", "a#b.txt")); err != nil || p != "/out/dir/a#b.txt" {
		t.Errorf("LocalPath(JoinRef(...)) = %q, %v", p, err)
	}
}
