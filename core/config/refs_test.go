package config

import (
	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"

	"slices"
	"strings"
	"testing"
)

func TestCheckRef(t *testing.T) {
	t.Parallel()
	policy := RefPolicy{Schemes: []string{"file", "https", "az"}, Hosts: []string{"*.blob.core.windows.net", "rmhazuregeo"},
		Containers: []string{"bronze", "silver", "data"}}
	tests := []struct {
		ref    string
		reason luciusv1.ErrorReason
	}{
		{"file:///data/in.pdf", luciusv1.ErrorReason_ERROR_REASON_UNSPECIFIED},
		{"file://localhost/data/in.pdf", luciusv1.ErrorReason_ERROR_REASON_UNSPECIFIED},
		{"https://rmh.blob.core.windows.net/bronze/a/b.tif", luciusv1.ErrorReason_ERROR_REASON_UNSPECIFIED},
		{"HTTPS://RMH.BLOB.CORE.WINDOWS.NET/bronze/x", luciusv1.ErrorReason_ERROR_REASON_UNSPECIFIED},
		{"az://rmhazuregeo/silver/cog.tif", luciusv1.ErrorReason_ERROR_REASON_UNSPECIFIED},
		{"", luciusv1.ErrorReason_ERROR_REASON_INVALID_REF},
		{"relative/path", luciusv1.ErrorReason_ERROR_REASON_INVALID_REF},
		{"mailto:someone@example.com", luciusv1.ErrorReason_ERROR_REASON_INVALID_REF},
		{"file://server/data/x", luciusv1.ErrorReason_ERROR_REASON_INVALID_REF},
		{"file:///", luciusv1.ErrorReason_ERROR_REASON_INVALID_REF},
		{"file:///data/../etc/passwd", luciusv1.ErrorReason_ERROR_REASON_INVALID_REF},
		{"https://rmh.blob.core.windows.net/bronze", luciusv1.ErrorReason_ERROR_REASON_INVALID_REF},
		{"https://rmh.blob.core.windows.net/", luciusv1.ErrorReason_ERROR_REASON_INVALID_REF},
		{"https://user:secret@rmh.blob.core.windows.net/bronze/x", luciusv1.ErrorReason_ERROR_REASON_INVALID_REF},
		{"s3://bucket/bronze/x", luciusv1.ErrorReason_ERROR_REASON_REF_SCHEME_NOT_ALLOWED},
		{"https://evil.example.com/bronze/x", luciusv1.ErrorReason_ERROR_REASON_REF_HOST_NOT_ALLOWED},
		{"https://blob.core.windows.net/bronze/x", luciusv1.ErrorReason_ERROR_REASON_REF_HOST_NOT_ALLOWED}, // the wildcard needs a subdomain
		{"https://x.blob.core.windows.net.evil.com/bronze/x", luciusv1.ErrorReason_ERROR_REASON_REF_HOST_NOT_ALLOWED},
		{"az://otheraccount/bronze/x", luciusv1.ErrorReason_ERROR_REASON_REF_HOST_NOT_ALLOWED},
		{"az://rmhazuregeo/gold/x", luciusv1.ErrorReason_ERROR_REASON_REF_CONTAINER_NOT_ALLOWED},
		{"file:///etc/passwd", luciusv1.ErrorReason_ERROR_REASON_REF_CONTAINER_NOT_ALLOWED},
	}
	for _, tt := range tests {
		got := policy.CheckRef(tt.ref)
		switch {
		case tt.reason == luciusv1.ErrorReason_ERROR_REASON_UNSPECIFIED && got != nil:
			t.Errorf("%q refused: %+v", tt.ref, got)
		case tt.reason != luciusv1.ErrorReason_ERROR_REASON_UNSPECIFIED && (got == nil || got.Reason != tt.reason):
			t.Errorf("%q: %+v, want %s", tt.ref, got, tt.reason)
		case got != nil && got.Description == "":
			t.Errorf("%q: no description", tt.ref)
		}
	}
	if p := (RefPolicy{}).CheckRef("s3://any/thing/x"); p != nil {
		t.Errorf("an empty policy refused a well-formed ref: %+v", p)
	}
}

// Whatever the input, CheckRef does not panic, and an allowed ref satisfies
// every list of the policy.
func FuzzCheckRef(f *testing.F) {
	for _, seed := range []string{"file:///data/x", "https://a.blob.core.windows.net/bronze/b", "az://acct/silver/c",
		"https://user@h/c/p", "file:///data/../x", "%zz", "https://[::1]/c/p", "az:///c/p", "https://h/c/p?x=1#f"} {
		f.Add(seed)
	}
	policy := RefPolicy{Schemes: []string{"file", "https", "az"}, Hosts: []string{"*.blob.core.windows.net", "acct"},
		Containers: []string{"bronze", "silver", "data"}}
	f.Fuzz(func(t *testing.T, ref string) {
		if policy.CheckRef(ref) != nil {
			return
		}
		r, problem := ParseRef(ref)
		if problem != nil {
			t.Fatalf("%q allowed but unparsable: %+v", ref, problem)
		}
		if !slices.Contains(policy.Schemes, r.Scheme) || !slices.Contains(policy.Containers, r.Container) {
			t.Fatalf("%q allowed with scheme %q container %q", ref, r.Scheme, r.Container)
		}
		if r.Host != "" && !hostAllowed(policy.Hosts, r.Host) {
			t.Fatalf("%q allowed with host %q", ref, r.Host)
		}
		if strings.Contains(r.Path, "/../") {
			t.Fatalf("%q allowed with a .. segment", ref)
		}
	})
}
