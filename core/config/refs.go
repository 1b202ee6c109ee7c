package config

import (
	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"

	"fmt"
	"net/url"
	"path"
	"slices"
	"strings"
)

// RefProblem says why a ref is refused.
type RefProblem struct {
	Reason      luciusv1.ErrorReason
	Description string
}

// Ref is a parsed input_ref or output_ref.
type Ref struct {
	Scheme string
	// Host is the host (https) or storage account (az); empty for file refs.
	Host string
	// Container is the first path segment: the blob container (or, for file
	// refs, the top directory).
	Container string
	Path      string
}

// ParseRef reads a ref: file:///absolute/path, https://host/container/blob or
// az://account/container/blob (any other scheme needs a host, a container and
// a path, like https).
func ParseRef(ref string) (Ref, *RefProblem) {
	invalid := func(format string, args ...any) (Ref, *RefProblem) {
		return Ref{}, &RefProblem{Reason: luciusv1.ErrorReason_ERROR_REASON_INVALID_REF, Description: fmt.Sprintf(format, args...)}
	}
	u, err := url.Parse(ref)
	if err != nil || u.Scheme == "" || u.Opaque != "" {
		return invalid("must be an absolute URL such as file:///data/in.pdf or https://host/container/blob")
	}
	if u.User != nil {
		return invalid("must not carry credentials")
	}
	r := Ref{Scheme: strings.ToLower(u.Scheme), Host: strings.ToLower(u.Hostname()), Path: u.Path}
	if strings.Contains(u.Path, "/../") || strings.HasSuffix(u.Path, "/..") || strings.Contains(u.Path, "/./") {
		return invalid("must not contain . or .. path segments")
	}
	segment, _, _ := strings.Cut(strings.TrimPrefix(u.Path, "/"), "/")
	r.Container = segment
	switch r.Scheme {
	case "file":
		if r.Host != "" && r.Host != "localhost" {
			return invalid("file URLs must not name a host (file:///absolute/path)")
		}
		r.Host = ""
		if !path.IsAbs(u.Path) || u.Path == "/" {
			return invalid("file URLs need an absolute path")
		}
	default:
		if r.Host == "" {
			return invalid("%s URLs must name a host or storage account", r.Scheme)
		}
		rest := strings.TrimPrefix(strings.TrimPrefix(u.Path, "/"), segment)
		if segment == "" || strings.Trim(rest, "/") == "" {
			return invalid("%s URLs must name a container and a blob path", r.Scheme)
		}
	}
	return r, nil
}

// CheckRef parses ref and checks it against the policy; nil means allowed.
func (p RefPolicy) CheckRef(ref string) *RefProblem {
	r, problem := ParseRef(ref)
	if problem != nil {
		return problem
	}
	if len(p.Schemes) > 0 && !slices.Contains(p.Schemes, r.Scheme) {
		return &RefProblem{Reason: luciusv1.ErrorReason_ERROR_REASON_REF_SCHEME_NOT_ALLOWED,
			Description: fmt.Sprintf("scheme %q is not allowed; allowed: %s", r.Scheme, strings.Join(p.Schemes, ", "))}
	}
	if len(p.Hosts) > 0 && r.Host != "" && !hostAllowed(p.Hosts, r.Host) {
		return &RefProblem{Reason: luciusv1.ErrorReason_ERROR_REASON_REF_HOST_NOT_ALLOWED,
			Description: fmt.Sprintf("host or account %q is not allowed; allowed: %s", r.Host, strings.Join(p.Hosts, ", "))}
	}
	if len(p.Containers) > 0 && !slices.Contains(p.Containers, r.Container) {
		return &RefProblem{Reason: luciusv1.ErrorReason_ERROR_REASON_REF_CONTAINER_NOT_ALLOWED,
			Description: fmt.Sprintf("container %q is not allowed; allowed: %s", r.Container, strings.Join(p.Containers, ", "))}
	}
	return nil
}

// hostAllowed matches exact hosts and "*.suffix" wildcards (subdomains only).
func hostAllowed(allowed []string, host string) bool {
	for _, a := range allowed {
		if suffix, ok := strings.CutPrefix(a, "*."); ok {
			if strings.HasSuffix(host, "."+suffix) {
				return true
			}
		} else if a == host {
			return true
		}
	}
	return false
}
