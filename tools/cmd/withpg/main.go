// Command withpg runs a command with DATABASE_URL pointing at a PostgreSQL
// server: the one already in DATABASE_URL, or a throwaway cluster it starts from
// the machine's PostgreSQL binaries and removes afterwards. `make test` runs the
// whole test suite through it so every package shares one server.
//
//	withpg [-dir .build/testpg] -- go test ./...
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"

	"github.com/lucius-platform/lucius/base/pgcluster"
)

func main() {
	dir := flag.String("dir", ".build/testpg", "directory for the throwaway cluster")
	flag.Parse()
	code, err := run(*dir, flag.Args())
	if err != nil {
		fmt.Fprintln(os.Stderr, "withpg:", err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

func run(dir string, args []string) (int, error) {
	if len(args) == 0 {
		return 2, errors.New("usage: withpg [-dir DIR] -- command [args...]")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	url := os.Getenv("DATABASE_URL")
	if url == "" {
		// A cluster left running in dir by a killed run is reused, not orphaned.
		cluster, err := pgcluster.Start(ctx, pgcluster.Config{Dir: dir, MaxConnections: 800})
		if err != nil {
			return 1, err
		}
		defer func() {
			_ = cluster.Stop(context.Background())
			_ = os.RemoveAll(dir)
		}()
		url = cluster.URL
		fmt.Fprintln(os.Stderr, "withpg: PostgreSQL at", url)
	}
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	cmd.Env = append(os.Environ(), "DATABASE_URL="+url)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return exit.ExitCode(), nil
	}
	return 0, err
}
