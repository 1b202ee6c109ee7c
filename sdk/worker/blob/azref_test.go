package blob

import (
	"strings"
	"testing"
)

func TestParseAzureRefAcceptsAzureNamesAndRefusesTheRest(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		ref  string
		want AzureRef
		ok   bool
	}{
		{"az://acct01/inputs/in.txt", AzureRef{"acct01", "inputs", "in.txt"}, true},
		{"az://ACCT01/inputs/a/b/c.pdf", AzureRef{"acct01", "inputs", "a/b/c.pdf"}, true},
		{"az://acct01/in-puts/job%201/out.json", AzureRef{"acct01", "in-puts", "job 1/out.json"}, true},
		{"az://acct01/results/job-1/", AzureRef{"acct01", "results", "job-1/"}, true},
		{"AZ://acct01/inputs/x", AzureRef{"acct01", "inputs", "x"}, true},
		{"az://acct01/inputs/%C3%BCn%C3%AF", AzureRef{"acct01", "inputs", "ünï"}, true},
		{"az://ab/inputs/x", AzureRef{}, false},                              // account too short
		{"az://acct_01/inputs/x", AzureRef{}, false},                         // account with "_"
		{"az://" + strings.Repeat("a", 25) + "/inputs/x", AzureRef{}, false}, // account too long
		{"az://acct01/Inputs/x", AzureRef{}, false},                          // uppercase container
		{"az://acct01/in--puts/x", AzureRef{}, false},                        // double hyphen
		{"az://acct01/-inputs/x", AzureRef{}, false},                         // leading hyphen
		{"az://acct01/ab/x", AzureRef{}, false},                              // container too short
		{"az://acct01/inputs", AzureRef{}, false},                            // no blob
		{"az://acct01/inputs/", AzureRef{}, false},                           // no blob
		{"az://acct01/inputs/a/../b", AzureRef{}, false},                     // ".." segment
		{"az://acct01/inputs/a//b", AzureRef{}, false},                       // empty segment
		{"az://acct01/inputs/a/%2E%2E/b", AzureRef{}, false},                 // escaped ".."
		{"az://acct01/inputs/a%00b", AzureRef{}, false},                      // control character
		{"az://acct01/inputs/a%5Cb", AzureRef{}, false},                      // backslash
		{"az://user@acct01/inputs/x", AzureRef{}, false},                     // credentials
		{"az://acct01:443/inputs/x", AzureRef{}, false},                      // port
		{"az://acct01/inputs/x?sv=2020", AzureRef{}, false},                  // query (a SAS)
		{"az://acct01/inputs/x#frag", AzureRef{}, false},                     // fragment
		{"https://acct01/inputs/x", AzureRef{}, false},                       // another scheme
		{"az:acct01/inputs/x", AzureRef{}, false},                            // opaque
		{"az://acct01/inputs/" + strings.Repeat("a", 1025), AzureRef{}, false},
	} {
		got, err := ParseAzureRef(tc.ref)
		if tc.ok != (err == nil) || got != tc.want {
			t.Errorf("ParseAzureRef(%q) = %+v, %v; want %+v (ok %v)", tc.ref, got, err, tc.want, tc.ok)
		}
		if err != nil && CodeOf(err) != CodeInvalidRef {
			t.Errorf("ParseAzureRef(%q) error code %q, want %s", tc.ref, CodeOf(err), CodeInvalidRef)
		}
	}
}

// Whatever the input, ParseAzureRef does not panic, and what it accepts
// obeys Azure's naming rules and parses again, from its canonical form, to
// the same ref.
func FuzzParseAzureRef(f *testing.F) {
	for _, seed := range []string{"az://acct01/inputs/in.txt", "az://acct01/results/job-1/", "az://acct01/in-puts/job%201/out.json",
		"az://acct01/inputs/a/../b", "az://ab/x/y", "az://acct01/inputs/%C3%BCn%C3%AF", "az://acct01/inputs/a%23b%3Fc"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, ref string) {
		r, err := ParseAzureRef(ref)
		if err != nil {
			if CodeOf(err) != CodeInvalidRef {
				t.Fatalf("ParseAzureRef(%q): error code %q, want %s", ref, CodeOf(err), CodeInvalidRef)
			}
			return
		}
		if checkAccount(r.Account) != nil || checkContainer(r.Container) != nil || r.Blob == "" || len(r.Blob) > 1024 {
			t.Fatalf("ParseAzureRef(%q) accepted %+v", ref, r)
		}
		for _, seg := range strings.Split(strings.TrimSuffix(r.Blob, "/"), "/") {
			if seg == "" || seg == "." || seg == ".." {
				t.Fatalf("ParseAzureRef(%q) accepted blob %q", ref, r.Blob)
			}
		}
		again, err := ParseAzureRef(r.String())
		if err != nil || again != r {
			t.Fatalf("ParseAzureRef(%q) = %+v, but its String %q parses to %+v, %v", ref, r, r.String(), again, err)
		}
	})
}
