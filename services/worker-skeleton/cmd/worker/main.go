// Command worker runs the example platform services (OCR, EMBEDDING, SIS,
// RASTER, TILES, the phased checkpoint demo and the runbook demo pool) on the
// worker SDK: LUCIUS_WORKER_SERVICE names one or a comma-separated list, and
// worker.Run does the rest (bus, idempotency store, ACK, heartbeats,
// RESULT, health and metrics, graceful drain). Configuration comes from the
// environment; see sdk/worker/README.md.
//
// LUCIUS_WORKER_FAULTS=true installs the chaos run's fault injection
// (package workertest/faults): never in production.
package main

import (
	"context"
	"fmt"
	"os"
	"strconv"

	"github.com/lucius-platform/lucius/sdk/worker"
	"github.com/lucius-platform/lucius/sdk/worker/workertest/faults"
	"github.com/lucius-platform/lucius/services/worker-skeleton/examples/embedding"
	"github.com/lucius-platform/lucius/services/worker-skeleton/examples/ocr"
	"github.com/lucius-platform/lucius/services/worker-skeleton/examples/phased"
	"github.com/lucius-platform/lucius/services/worker-skeleton/examples/raster"
	"github.com/lucius-platform/lucius/services/worker-skeleton/examples/runbookdemo"
	"github.com/lucius-platform/lucius/services/worker-skeleton/examples/sis"
	"github.com/lucius-platform/lucius/services/worker-skeleton/examples/tiles"
)

// services are the examples this binary can run, by service name.
var services = []worker.Service{
	{Name: "ocr", Executor: ocr.Executor{}, Handlers: []string{"OCR"}},
	{Name: "embedding", Executor: embedding.Executor{}, Handlers: []string{"EMBEDDING"}},
	{Name: "sis", Executor: sis.Executor{}, Handlers: []string{"SIS"}},
	worker.Serve("raster", raster.NewExecutor()), // several workflow handlers each
	worker.Serve("tiles", tiles.NewExecutor()),
	// A long step in phases that resumes from its checkpoints.
	{Name: phased.Service, Executor: phased.Executor{}, Handlers: []string{phased.Handler}},
	// The demo pool for runbooks: any function, behaving as its params say.
	// It announces none: the runbooks that use it register their functions.
	{Name: runbookdemo.Service, Executor: runbookdemo.Executor{}},
}

func main() {
	opts := []worker.Option{worker.WithServices(services...)}
	if v := os.Getenv("LUCIUS_WORKER_FAULTS"); v != "" {
		on, err := strconv.ParseBool(v)
		if err != nil {
			fmt.Fprintf(os.Stderr, "worker: LUCIUS_WORKER_FAULTS=%q: want true or false\n", v)
			os.Exit(1)
		}
		if on {
			opts = append(opts, worker.WithMiddleware(faults.Inject))
		}
	}
	if err := worker.Run(context.Background(), opts...); err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(1)
	}
}
