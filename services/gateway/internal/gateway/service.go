// Package gateway is Lucius's ingress and anti-corruption layer. It validates
// partner commands (proto annotations, then the workflow's inputs and the
// ref policy), derives deterministic job ids, stores each accepted command with
// its orchestrator-jobs message in one transaction and answers 202 with the job
// id, or refuses it at an admission limit (429). It serves the job API (get,
// list, steps, events, cancel, replay), dead letters, workflow definitions,
// the live configuration (ConfigService) and runbooks (RunbookService: apply a
// version and register its steps' handlers and generated workflows, load
// member data, read batches with their phase and init executions) from
// PostgreSQL, over gRPC and REST (grpc-gateway, dialed through the gRPC
// endpoint so REST calls pass the same interceptors), and the web console
// (package console) at /ui/, and the OpenAPI document at /openapi.json with
// its viewer at /docs (package docs).
package gateway

import (
	"context"
	"errors"
	"net/http"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/lucius-platform/lucius/base/auth"
	"github.com/lucius-platform/lucius/base/migrate"
	"github.com/lucius-platform/lucius/base/process"
	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
	"github.com/lucius-platform/lucius/core/bootstrap"
	"github.com/lucius-platform/lucius/core/registry"
	"github.com/lucius-platform/lucius/core/runbook"
	"github.com/lucius-platform/lucius/core/workflow"
	"github.com/lucius-platform/lucius/services/gateway/internal/console"
	"github.com/lucius-platform/lucius/services/gateway/internal/docs"
	"github.com/lucius-platform/lucius/services/gateway/internal/requestid"
)

// Config configures the gateway. Zero values take the defaults noted.
type Config struct {
	// Service: gRPC on 127.0.0.1:9090, HTTP on 127.0.0.1:8080, 20 connections by default.
	process.Service
	// WorkflowsDir holds definitions (and a handlers.yaml) registered at start,
	// after the built-in ones. Optional.
	WorkflowsDir string
	// WorkflowLimits bound workflow definitions and their jobs (zero fields:
	// workflow's defaults); every process should have the same.
	WorkflowLimits workflow.Limits
	Policy         Policy
	// Console configures the web console at /ui/ and its login tickets.
	Console console.Config
	// RequestIDs says how long request ids of mutating calls (AIP-155) are
	// remembered and how a duplicate of a running call waits.
	RequestIDs requestid.Config
}

// Validate reports missing settings.
func (c *Config) Validate() error {
	return errors.Join(c.Service.Validate(), c.Policy.Payload.Validate(), c.WorkflowLimits.Validate(), c.Console.Validate(),
		c.RequestIDs.Validate())
}

func (c *Config) defaults() {
	c.Service.Defaults("127.0.0.1:9090", "127.0.0.1:8080", 20)
	c.Policy.Payload.defaults()
}

// Run serves the gateway until ctx ends.
func Run(ctx context.Context, cfg Config) error {
	cfg.defaults()
	if err := cfg.Validate(); err != nil {
		return err
	}
	log := cfg.Logger
	rt, err := bootstrap.Open(ctx, cfg.Service, bootstrap.Options{
		Migrations: []migrate.Set{console.Migrations, requestid.Migrations}, SeedGlobal: &cfg.Policy.Seed})
	if err != nil {
		return err
	}
	defer rt.Close()
	pool, live, store := rt.Pool, rt.Live, rt.Ledger
	workflows, err := registry.Open(ctx, store, cfg.WorkflowsDir, cfg.WorkflowLimits)
	if err != nil {
		return err
	}

	commands, err := newCommandService(store, workflows, live, cfg.Policy, log)
	if err != nil {
		return err
	}
	requestIDs, err := requestid.New(requestid.NewStore(pool), cfg.RequestIDs, log)
	if err != nil {
		return err
	}
	sessions := console.NewStore(pool)
	authn, err := auth.NewAuthenticator(cfg.Auth)
	if err != nil {
		return err
	}
	svc := cfg.Service
	svc.Sessions, svc.Authenticator = sessions, authn
	// Request ids run after the request rates: a refused call reserves nothing.
	ep, err := svc.Endpoint([]grpc.UnaryServerInterceptor{commands.rates.unary(), requestIDs.Unary()},
		runtime.WithForwardResponseOption(acceptedFor202), runtime.WithForwardResponseRewriter(invalidStaysExplicit),
		runtime.WithMetadata(console.SessionMetadata))
	if err != nil {
		return err
	}
	con, err := console.New(cfg.Console, sessions, authn, ep.HTTPAddr(), log)
	if err != nil {
		ep.Close()
		return err
	}
	// /openapi.json and /docs are public; everything behind them authenticates.
	ep.Front = func(rest http.Handler) http.Handler { return docs.Front(con.Front(rest)) }
	luciusv1.RegisterConsoleServiceServer(ep.GRPC, con)
	luciusv1.RegisterCommandServiceServer(ep.GRPC, commands)
	watch := newWatchHub(store, log)
	hubCtx, stopHub := context.WithCancel(context.WithoutCancel(ctx))
	defer stopHub()
	go watch.run(hubCtx)
	luciusv1.RegisterJobServiceServer(ep.GRPC, &jobService{store: store, log: log, watch: watch})
	luciusv1.RegisterWorkflowServiceServer(ep.GRPC, &workflowService{reg: workflows, log: log})
	luciusv1.RegisterDeadLetterServiceServer(ep.GRPC, &deadLetterService{store: store, log: log})
	luciusv1.RegisterAssetServiceServer(ep.GRPC, &assetService{store: store, log: log})
	luciusv1.RegisterConfigServiceServer(ep.GRPC, &configService{watcher: live, log: log})
	luciusv1.RegisterRunbookServiceServer(ep.GRPC, &runbookService{store: runbook.NewStore(pool), reg: workflows, log: log})
	luciusv1.RegisterCircuitBreakerServiceServer(ep.GRPC, &circuitBreakerService{store: store, log: log})
	luciusv1.RegisterWorkerServiceServer(ep.GRPC, &workerService{store: store, log: log})
	if err := errors.Join(luciusv1.RegisterCommandServiceHandler(ctx, ep.REST, ep.Conn()),
		luciusv1.RegisterJobServiceHandler(ctx, ep.REST, ep.Conn()),
		luciusv1.RegisterWorkflowServiceHandler(ctx, ep.REST, ep.Conn()),
		luciusv1.RegisterDeadLetterServiceHandler(ctx, ep.REST, ep.Conn()),
		luciusv1.RegisterAssetServiceHandler(ctx, ep.REST, ep.Conn()),
		luciusv1.RegisterConfigServiceHandler(ctx, ep.REST, ep.Conn()),
		luciusv1.RegisterRunbookServiceHandler(ctx, ep.REST, ep.Conn()),
		luciusv1.RegisterCircuitBreakerServiceHandler(ctx, ep.REST, ep.Conn()),
		luciusv1.RegisterWorkerServiceHandler(ctx, ep.REST, ep.Conn()),
		luciusv1.RegisterConsoleServiceHandler(ctx, ep.REST, ep.Conn())); err != nil {
		ep.Close()
		return err
	}
	log.Info("gateway serving", "grpc", ep.GRPCAddr(), "http", ep.HTTPAddr())
	return rt.Serve(ctx, ep)
}

// acceptedFor202 answers a REST submit with 202 Accepted: the command is
// accepted, its work runs asynchronously.
// invalidStaysExplicit keeps "valid": false in a workflow dry run's REST
// answer: callers test that field, and proto3 JSON leaves out a false bool.
func invalidStaysExplicit(_ context.Context, m proto.Message) (any, error) {
	v, ok := m.(*luciusv1.ValidateWorkflowResponse)
	if !ok || v.GetValid() {
		return m, nil
	}
	return map[string]any{"valid": false, "errors": v.GetErrors()}, nil
}

func acceptedFor202(_ context.Context, w http.ResponseWriter, m proto.Message) error {
	if _, ok := m.(*luciusv1.SubmitResponse); ok {
		w.WriteHeader(http.StatusAccepted)
	}
	return nil
}
