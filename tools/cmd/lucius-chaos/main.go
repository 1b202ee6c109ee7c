// Command lucius-chaos runs the chaos end-to-end test (`make chaos`): a fresh
// suite on its own PostgreSQL cluster, N three-step jobs (some with injected
// faults) submitted while orchestrators, the reconciler and workers are
// SIGKILLed and restarted at random moments and PostgreSQL is restarted once;
// then it checks the ledger and prints the report. It exits 1 when the report
// lists problems.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/lucius-platform/lucius/tools/chaos"
)

func main() {
	var cfg chaos.Config
	flag.StringVar(&cfg.BinDir, "bin", ".build/bin", "directory holding the service binaries")
	flag.StringVar(&cfg.DataDir, "data", ".build/chaos", "directory for the run's cluster and workspace (recreated)")
	flag.IntVar(&cfg.Jobs, "jobs", 500, "three-step jobs to submit")
	flag.Float64Var(&cfg.Rate, "rate", 10, "jobs submitted per second")
	flag.Int64Var(&cfg.Seed, "seed", 0, "seed for faults and kills (0: from the clock; the report prints it)")
	flag.DurationVar(&cfg.KillEvery, "kill-every", 2*time.Second, "mean interval between kills")
	flag.DurationVar(&cfg.Down.Min, "down-min", 200*time.Millisecond, "shortest time a killed process stays down")
	flag.DurationVar(&cfg.Down.Max, "down-max", 3*time.Second, "longest time a killed process stays down")
	flag.IntVar(&cfg.MinKills, "min-kills", 3, "keep killing after the last submit until each kind was killed this often")
	flag.BoolVar(&cfg.PGRestart, "pg-restart", true, "restart PostgreSQL once, when half the jobs are accepted")
	flag.Float64Var(&cfg.FaultRate, "fault-rate", 0.2, "fraction of jobs given an injected fault")
	flag.DurationVar(&cfg.Timeout, "timeout", 10*time.Minute, "bound on the whole run")
	logs := flag.String("logs", "", "file for the suite's log lines (default: discarded)")
	quiet := flag.Bool("quiet", false, "print only the report, not the progress lines")
	flag.Parse()
	cfg.Bus = os.Getenv("LUCIUS_BUS") // servicebus: the test broker, or the namespace LUCIUS_SERVICEBUS_* name
	passed, err := run(cfg, *logs, *quiet)
	if err != nil {
		fmt.Fprintln(os.Stderr, "lucius-chaos:", err)
	}
	if err != nil || !passed {
		os.Exit(1)
	}
}

// run performs the run and prints its report; it reports whether the run
// found no problems.
func run(cfg chaos.Config, logPath string, quiet bool) (bool, error) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := os.RemoveAll(cfg.DataDir); err != nil {
		return false, err
	}
	if logPath != "" {
		f, err := os.Create(logPath)
		if err != nil {
			return false, err
		}
		defer f.Close() //nolint:errcheck // the suite's log: the run's result is the report
		cfg.Output = f
	}
	if !quiet {
		cfg.Progress = os.Stdout
	}
	report, err := chaos.Run(ctx, cfg)
	if err != nil {
		return false, err
	}
	fmt.Println()
	report.Print(os.Stdout)
	return len(report.Problems) == 0, nil
}
