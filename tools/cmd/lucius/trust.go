package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/lucius-platform/lucius/base/auth"
)

// trustCommand lays out the security material a suite needs outside make
// up (which does the same in .lucius): docker-compose.yml runs it before
// the services, and on Kubernetes its files become the Secrets.
func trustCommand() *cobra.Command {
	var (
		pools []string
		ttl   time.Duration
	)
	cmd := &cobra.Command{
		Use:   "trust DIR [--worker SERVICES]...",
		Short: "Create a local issuer, the callback keys and worker tokens in DIR (docker compose, a test cluster)",
		Long: `Create what the processes of a suite trust and share, as make up does in .lucius:
  DIR/issuer/         a local issuer (jwks.json: LUCIUS_AUTH_JWKS_FILE of every process)
  DIR/secrets/callback-keys   the orchestrators' and the reconciler's LUCIUS_CALLBACK_KEYS_FILE
  DIR/tokens/<pool>.jwt       a worker token per --worker (LUCIUS_AUTH_TOKEN_FILE)
The issuer and the keys are kept when they exist; the worker tokens are minted
anew each time (valid --ttl). --worker takes a pool's comma-separated services;
the token file is named after them joined by '-'.`,
		Example: `  lucius trust .lucius-compose --worker ocr --worker raster,tiles,demo`,
		Args:    usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			if ttl <= 0 || ttl > 30*24*time.Hour {
				return &codedError{code: exitUsage, err: fmt.Errorf("--ttl %v: want more than 0 and at most 720h", ttl)}
			}
			dir := args[0]
			issuer, err := auth.OpenLocalIssuer(filepath.Join(dir, "issuer"))
			if err != nil {
				return err
			}
			for _, sub := range []string{"secrets", "tokens"} {
				if err := os.MkdirAll(filepath.Join(dir, sub), 0o700); err != nil {
					return err
				}
			}
			keys := filepath.Join(dir, "secrets", "callback-keys")
			if err := auth.EnsureCallbackKeyFile(keys); err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			fmt.Fprintln(out, "LUCIUS_AUTH_JWKS_FILE="+issuer.JWKSPath())
			fmt.Fprintln(out, "LUCIUS_CALLBACK_KEYS_FILE="+keys)
			for _, pool := range pools {
				var services []string
				for _, s := range strings.Split(pool, ",") {
					if s = strings.ToLower(strings.TrimSpace(s)); s != "" {
						services = append(services, s)
					}
				}
				if len(services) == 0 {
					return &codedError{code: exitUsage, err: fmt.Errorf("--worker %q names no service", pool)}
				}
				tok, err := issuer.Mint(auth.Grant{Subject: "worker:" + strings.Join(services, ","), Roles: []auth.Role{auth.RoleWorker},
					Services: services}, ttl)
				if err != nil {
					return err
				}
				path := filepath.Join(dir, "tokens", strings.Join(services, "-")+".jwt")
				if err := os.WriteFile(path+".tmp", []byte(tok+"\n"), 0o600); err != nil {
					return err
				}
				if err := os.Rename(path+".tmp", path); err != nil {
					return err
				}
				fmt.Fprintln(out, "LUCIUS_AUTH_TOKEN_FILE="+path)
			}
			return nil
		},
	}
	cmd.Flags().StringArrayVar(&pools, "worker", nil, "a worker pool's services, comma-separated (repeatable): mints its token")
	cmd.Flags().DurationVar(&ttl, "ttl", 30*24*time.Hour, "how long the worker tokens are valid")
	return cmd
}
