package config

import (
	"slices"
	"strings"
	"testing"
)

func TestCheckRef(t *testing.T) {
	t.Parallel()
	policy := RefPolicy{Schemes: []string{"file", "https", "az"}, Hosts: []string{"*.blob.core.windows.net", "rmhazuregeo"},
		Containers: []string{"bronze", "silver", "data"}}
	tests := []struct {
		ref, reason string
	}{
		{"file:///data/in.pdf", ""},
		{"file://localhost/data/in.pdf", ""},
		{"https://rmh.blob.core.windows.net/bronze/a/b.tif", ""},
		{"HTTPS://RMH.BLOB.CORE.WINDOWS.NET/bronze/x", ""},
		{"az://rmhazuregeo/silver/cog.tif", ""},
		{"", ReasonInvalidRef},
		{"relative/path", ReasonInvalidRef},
		{"mailto:someone@example.com", ReasonInvalidRef},
		{"file://server/data/x", ReasonInvalidRef},
		{"file:///", ReasonInvalidRef},
		{"file:///data/../etc/passwd", ReasonInvalidRef},
		{"https://rmh.blob.core.windows.net/bronze", ReasonInvalidRef},
		{"https://rmh.blob.core.windows.net/", ReasonInvalidRef},
		{"https://user:secret@rmh.blob.core.windows.net/bronze/x", ReasonInvalidRef},
		{"s3://bucket/bronze/x", ReasonRefSchemeNotAllowed},
		{"https://evil.example.com/bronze/x", ReasonRefHostNotAllowed},
		{"https://blob.core.windows.net/bronze/x", ReasonRefHostNotAllowed}, // the wildcard needs a subdomain
		{"https://x.blob.core.windows.net.evil.com/bronze/x", ReasonRefHostNotAllowed},
		{"az://otheraccount/bronze/x", ReasonRefHostNotAllowed},
		{"az://rmhazuregeo/gold/x", ReasonRefContainerForbidden},
		{"file:///etc/passwd", ReasonRefContainerForbidden},
	}
	for _, tt := range tests {
		got := policy.CheckRef(tt.ref)
		switch {
		case tt.reason == "" && got != nil:
			t.Errorf("%q refused: %+v", tt.ref, got)
		case tt.reason != "" && (got == nil || got.Reason != tt.reason):
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
