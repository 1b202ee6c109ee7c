package main

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/lucius-platform/lucius/base/auth"
)

// defaultIssuerDir is where `make up` keeps the local issuer.
const defaultIssuerDir = ".lucius/issuer"

func tokenCommand() *cobra.Command {
	var (
		roles, tenants, services []string
		subject, issuerDir, aud  string
		ttl                      time.Duration
	)
	cmd := &cobra.Command{
		Use:   "token --role partner|operator|worker [--tenant T]... [--service S]...",
		Short: "Mint a bearer token from the local issuer (make up's .lucius/issuer)",
		Long: `Mint a bearer token from the embedded default's local issuer and print it.

A partner token needs --tenant (one or more: the tenants it acts for); a worker
token needs --service (the worker services whose directives it answers); an
operator token needs neither. The issuer directory defaults to
$LUCIUS_LOCAL_ISSUER_DIR, else .lucius/issuer; it is created when missing, and
the services trust its jwks.json (LUCIUS_AUTH_JWKS_FILE).`,
		Example: `  TOKEN=$(lucius token --tenant acme --role partner)
  curl -H "Authorization: Bearer $TOKEN" localhost:8080/v1/jobs`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			g, err := grant(roles, tenants, services, subject, aud)
			if err != nil {
				return err
			}
			if ttl <= 0 || ttl > 30*24*time.Hour {
				return fmt.Errorf("--ttl %v: want more than 0 and at most 720h", ttl)
			}
			issuer, err := auth.OpenLocalIssuer(issuerDir)
			if err != nil {
				return err
			}
			tok, err := issuer.Mint(g, ttl)
			if err != nil {
				return err
			}
			_, err = fmt.Fprintln(cmd.OutOrStdout(), tok)
			return err
		},
	}
	dir := os.Getenv("LUCIUS_LOCAL_ISSUER_DIR")
	if dir == "" {
		dir = defaultIssuerDir
	}
	f := cmd.Flags()
	f.StringSliceVar(&roles, "role", nil, "partner, operator or worker (repeat or comma-separate for several)")
	f.StringSliceVar(&tenants, "tenant", nil, "tenant the token acts for (partner; repeatable)")
	f.StringSliceVar(&services, "service", nil, "worker service the token answers directives of (worker; repeatable)")
	f.StringVar(&subject, "subject", "", "the token's sub (default: derived from role and tenants or services)")
	f.StringVar(&aud, "audience", auth.DefaultAudience, "the token's aud (the services' LUCIUS_AUTH_AUDIENCE)")
	f.DurationVar(&ttl, "ttl", time.Hour, "how long the token is valid")
	f.StringVar(&issuerDir, "issuer-dir", dir, "the local issuer's directory")
	_ = cmd.MarkFlagRequired("role")
	return cmd
}

// grant checks the flags and turns them into what the token says.
func grant(roleNames, tenants, services []string, subject, aud string) (auth.Grant, error) {
	g := auth.Grant{Subject: subject, Audience: aud}
	for _, name := range roleNames {
		r, ok := auth.ParseRole(name)
		if !ok {
			return g, fmt.Errorf("--role %q: want partner, operator or worker", name)
		}
		g.Roles = append(g.Roles, r)
	}
	for _, t := range tenants {
		if t = auth.NormalizeTenant(t); t != "" {
			g.Tenants = append(g.Tenants, t)
		}
	}
	for _, s := range services {
		if s = strings.ToLower(strings.TrimSpace(s)); s != "" {
			g.Services = append(g.Services, s)
		}
	}
	var errs []error
	has := func(r auth.Role) bool { return (&auth.Principal{Roles: g.Roles}).Has(r) }
	if has(auth.RolePartner) && len(g.Tenants) == 0 {
		errs = append(errs, errors.New("a partner token needs --tenant"))
	}
	if has(auth.RoleWorker) && len(g.Services) == 0 {
		errs = append(errs, errors.New("a worker token needs --service"))
	}
	if g.Subject == "" {
		parts := []string{strings.Join(roleNames, "+")}
		parts = append(parts, g.Tenants...)
		parts = append(parts, g.Services...)
		g.Subject = "cli:" + strings.Join(parts, ":")
	}
	return g, errors.Join(errs...)
}
