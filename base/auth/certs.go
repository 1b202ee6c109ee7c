package auth

import (
	"crypto/x509"
	"fmt"
	"strings"
)

// CertIdentities maps verified mTLS client certificates (their subject
// common name) to grants. Without an entry for a certificate's CN, the CN
// names the one worker service it serves: a certificate issued to "ocr"
// authenticates an OCR worker. Which certificates are verified at all is the
// TLS listener's trust bundle (server.TLSConfig).
type CertIdentities map[string]CertGrant

// CertGrant is what a certificate's identity may do: a role and the
// services (worker) or tenants (partner) it holds.
type CertGrant struct {
	Role     Role
	Services []string
	Tenants  []string
}

// ParseCertIdentities reads "cn=role[:name[|name…]],…", e.g.
// "ocr-pool=worker:ocr,ops=operator,acme-batch=partner:acme|acme-eu".
func ParseCertIdentities(s string) (CertIdentities, error) {
	out := CertIdentities{}
	for _, entry := range strings.Split(s, ",") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		cn, grant, ok := strings.Cut(entry, "=")
		roleName, names, _ := strings.Cut(grant, ":")
		role, known := ParseRole(roleName)
		if !ok || strings.TrimSpace(cn) == "" || !known {
			return nil, fmt.Errorf("certificate identity %q: want cn=partner|operator|worker[:name|name]", entry)
		}
		g := CertGrant{Role: role}
		for _, n := range strings.Split(names, "|") {
			if n = strings.ToLower(strings.TrimSpace(n)); n == "" {
				continue
			}
			if role == RoleWorker {
				g.Services = append(g.Services, n)
			} else {
				g.Tenants = append(g.Tenants, n)
			}
		}
		out[strings.TrimSpace(cn)] = g
	}
	return out, nil
}

func (c CertIdentities) principal(cert *x509.Certificate) (*Principal, error) {
	cn := strings.TrimSpace(cert.Subject.CommonName)
	if cn == "" {
		return nil, fmt.Errorf("%w: client certificate has no common name", ErrNoGrant)
	}
	g, ok := c[cn]
	if !ok {
		g = CertGrant{Role: RoleWorker, Services: []string{strings.ToLower(cn)}}
	}
	return &Principal{Subject: cn, Issuer: "mtls", Roles: []Role{g.Role}, Tenants: g.Tenants, Services: g.Services}, nil
}
