package stack

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/lucius-platform/lucius/base/auth"
)

// Worker tokens live a day and are re-minted every hour; workers re-read
// their token file when it changes.
const (
	workerTokenTTL     = 24 * time.Hour
	workerTokenRefresh = time.Hour
)

// trust is the suite's security material under DataDir: the local issuer
// every process trusts (issuer/), the callback keys orchestrators and the
// reconciler share (secrets/callback-keys) and each worker's token (tokens/).
type trust struct {
	issuer       *auth.LocalIssuer
	callbackKeys string
	tokensDir    string
	// workerTokens maps a token file to the services it grants.
	workerTokens map[string][]string
}

func newTrust(dataDir string) (*trust, error) {
	issuer, err := auth.OpenLocalIssuer(filepath.Join(dataDir, "issuer"))
	if err != nil {
		return nil, err
	}
	secrets := filepath.Join(dataDir, "secrets")
	if err := os.MkdirAll(secrets, 0o700); err != nil {
		return nil, err
	}
	t := &trust{issuer: issuer, callbackKeys: filepath.Join(secrets, "callback-keys"),
		tokensDir: filepath.Join(dataDir, "tokens"), workerTokens: map[string][]string{}}
	if err := auth.EnsureCallbackKeyFile(t.callbackKeys); err != nil {
		return nil, err
	}
	return t, os.MkdirAll(t.tokensDir, 0o700)
}

// env is what every process needs to trust the local issuer.
func (t *trust) env() map[string]string {
	return map[string]string{"LUCIUS_AUTH_JWKS_FILE": t.issuer.JWKSPath()}
}

// workerToken mints the token file of a worker process serving services.
func (t *trust) workerToken(process string, services []string) (string, error) {
	path := filepath.Join(t.tokensDir, process+".jwt")
	t.workerTokens[path] = services
	return path, t.mintWorker(path, services)
}

func (t *trust) mintWorker(path string, services []string) error {
	tok, err := t.issuer.Mint(auth.Grant{Subject: "worker:" + strings.Join(services, ","), Roles: []auth.Role{auth.RoleWorker},
		Services: services}, workerTokenTTL)
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(tok+"\n"), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// refresh re-mints the worker tokens until ctx ends.
func (t *trust) refresh(ctx context.Context) {
	tick := time.NewTicker(workerTokenRefresh)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		for path, services := range t.workerTokens {
			if err := t.mintWorker(path, services); err != nil {
				fmt.Fprintf(os.Stderr, "stack: refresh %s: %v\n", path, err)
			}
		}
	}
}

// Token mints a token from the suite's local issuer (valid one hour), for
// tests and tools calling the suite: e.g. a partner of tenant acme, or an
// operator.
func (s *Stack) Token(g auth.Grant) (string, error) { return s.trust.issuer.Mint(g, time.Hour) }

// OperatorToken mints an operator's token.
func (s *Stack) OperatorToken() (string, error) {
	return s.Token(auth.Grant{Subject: "stack-operator", Roles: []auth.Role{auth.RoleOperator}})
}

// Issuer is the suite's local issuer (DataDir/issuer).
func (s *Stack) Issuer() *auth.LocalIssuer { return s.trust.issuer }
