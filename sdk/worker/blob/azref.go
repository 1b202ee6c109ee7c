package blob

import (
	"fmt"
	"net/url"
	"strings"
)

// AzureRef is a parsed az://account/container/path ref.
type AzureRef struct {
	// Account is the storage account: 3-24 lowercase letters and digits.
	Account string
	// Container: 3-63 lowercase letters, digits and single hyphens, starting
	// and ending with a letter or digit.
	Container string
	// Blob is the blob's name, percent-decoded: 1-1024 characters, no empty,
	// "." or ".." segments. It ends with "/" when the ref names a prefix (an
	// output folder, see JoinRef).
	Blob string
}

// ParseAzureRef reads az://account/container/path. Every problem is a
// permanent CodeInvalidRef error naming the rule broken.
func ParseAzureRef(ref string) (AzureRef, error) {
	bad := func(format string, args ...any) (AzureRef, error) {
		return AzureRef{}, Permanent(CodeInvalidRef, fmt.Errorf("ref %q: "+format, append([]any{Clip(ref)}, args...)...))
	}
	u, err := url.Parse(ref)
	if err != nil {
		return bad("%v", err)
	}
	if !strings.EqualFold(u.Scheme, "az") {
		return bad("want az://account/container/path")
	}
	if u.User != nil || u.Port() != "" || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" {
		return bad("want az://account/container/path without credentials, port, query or fragment")
	}
	r := AzureRef{Account: strings.ToLower(u.Host)}
	if err := checkAccount(r.Account); err != nil {
		return bad("%v", err)
	}
	container, blob, _ := strings.Cut(strings.TrimPrefix(u.Path, "/"), "/")
	r.Container, r.Blob = container, blob
	if err := checkContainer(r.Container); err != nil {
		return bad("%v", err)
	}
	if r.Blob == "" {
		return bad("names no blob: want az://account/container/path")
	}
	if len(r.Blob) > 1024 {
		return bad("blob name is %d bytes; Azure allows 1024", len(r.Blob))
	}
	segs := strings.Split(strings.TrimSuffix(r.Blob, "/"), "/")
	for _, seg := range segs {
		if seg == "" || seg == "." || seg == ".." {
			return bad(`blob name %q has an empty, "." or ".." segment`, Clip(r.Blob))
		}
	}
	for _, c := range r.Blob {
		if c < 0x20 || c == 0x7f || c == '\\' {
			return bad("blob name has a control character or a backslash")
		}
	}
	return r, nil
}

// String is the ref in canonical form (the blob name percent-encoded where
// a URL path needs it).
func (r AzureRef) String() string {
	return (&url.URL{Scheme: "az", Host: r.Account, Path: "/" + r.Container + "/" + r.Blob}).String()
}

// checkAccount applies Azure's storage account naming rule, which also
// keeps the default endpoint's host name well-formed.
func checkAccount(a string) error {
	if len(a) < 3 || len(a) > 24 {
		return fmt.Errorf("storage account %q: want 3-24 lowercase letters and digits", Clip(a))
	}
	for _, c := range a {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') {
			return fmt.Errorf("storage account %q: want 3-24 lowercase letters and digits", Clip(a))
		}
	}
	return nil
}

// checkContainer applies Azure's container naming rule.
func checkContainer(c string) error {
	bad := fmt.Errorf("container %q: want 3-63 lowercase letters, digits and single hyphens, starting and ending with a letter or digit", Clip(c))
	if len(c) < 3 || len(c) > 63 || c[0] == '-' || c[len(c)-1] == '-' || strings.Contains(c, "--") {
		return bad
	}
	for _, ch := range c {
		if (ch < 'a' || ch > 'z') && (ch < '0' || ch > '9') && ch != '-' {
			return bad
		}
	}
	return nil
}
