package main

import (
	"bufio"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/lucius-platform/lucius/base/auth"
	"github.com/lucius-platform/lucius/base/freeport"
)

// joinEnvFile is the file, in make up's data folder, holding the environment
// a worker needs to join the suite (tools/stack writes it at start: its
// JoinEnvFile, KEY=VALUE lines).
const joinEnvFile = "worker.env"

func workerEnvCommand() *cobra.Command {
	var (
		dataDir string
		ttl     time.Duration
	)
	cmd := &cobra.Command{
		Use:   "env SERVICE",
		Short: "Print the environment that joins a new worker to the suite make up runs",
		Long: `Print, as shell export lines, what a worker serving SERVICE needs to join the
suite that make up runs from this checkout: its bus, database, gateway (where
the worker announces its handlers), file roots and trust, a worker token for
SERVICE (written under the data folder, valid for --ttl) and a free HTTP
address. Evaluate it in the shell that starts the worker.`,
		Example: `  eval "$(lucius worker env reverser)" && (cd /tmp/reverser && go run .)`,
		Args:    usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			service := args[0]
			if !serviceNamePattern.MatchString(service) {
				return &codedError{code: exitUsage, err: fmt.Errorf("service %q: want lowercase letters, digits and '-', starting with a letter", service)}
			}
			dir, err := filepath.Abs(dataDir)
			if err != nil {
				return err
			}
			env, err := readJoinEnv(filepath.Join(dir, joinEnvFile))
			if err != nil {
				return err
			}
			tokenFile, err := mintWorkerToken(filepath.Join(dir, "issuer"), filepath.Join(dir, "tokens"), service, ttl)
			if err != nil {
				return err
			}
			addr, err := freeport.Addr()
			if err != nil {
				return err
			}
			env["LUCIUS_WORKER_SERVICE"], env["LUCIUS_AUTH_TOKEN_FILE"], env["LUCIUS_WORKER_HTTP_ADDR"] = service, tokenFile, addr
			out := cmd.OutOrStdout()
			for _, k := range slices.Sorted(maps.Keys(env)) {
				if _, err := fmt.Fprintf(out, "export %s=%s\n", k, shellQuote(env[k])); err != nil {
					return err
				}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&dataDir, "data", ".lucius", "make up's data folder")
	cmd.Flags().DurationVar(&ttl, "ttl", 24*time.Hour, "how long the worker's token is valid")
	return cmd
}

// readJoinEnv reads KEY=VALUE lines.
func readJoinEnv(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%s is missing: start the suite with make up first (or pass --data)", path)
	}
	if err != nil {
		return nil, err
	}
	defer f.Close() //nolint:errcheck // opened for reading
	env := map[string]string{}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("%s:%d: want KEY=VALUE", path, n)
		}
		env[k] = v
	}
	return env, sc.Err()
}

// mintWorkerToken writes a worker token for service under tokensDir.
func mintWorkerToken(issuerDir, tokensDir, service string, ttl time.Duration) (string, error) {
	if ttl <= 0 || ttl > 30*24*time.Hour {
		return "", &codedError{code: exitUsage, err: fmt.Errorf("--ttl %v: want more than 0 and at most 720h", ttl)}
	}
	issuer, err := auth.OpenLocalIssuer(issuerDir)
	if err != nil {
		return "", err
	}
	tok, err := issuer.Mint(auth.Grant{Subject: "worker:" + service, Roles: []auth.Role{auth.RoleWorker},
		Services: []string{service}, Audience: auth.DefaultAudience}, ttl)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(tokensDir, 0o700); err != nil {
		return "", err
	}
	path := filepath.Join(tokensDir, "worker-"+service+"-joined.jwt")
	return path, os.WriteFile(path, []byte(tok+"\n"), 0o600)
}

// shellQuote quotes v for a POSIX shell.
func shellQuote(v string) string { return "'" + strings.ReplaceAll(v, "'", `'\''`) + "'" }
