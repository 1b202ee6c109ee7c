// Package core is the root of Lucius's control-plane module: the ledger, the
// workflow and runbook engines, live configuration, the handler registry and
// circuit breakers. Services import its packages; it imports no service.
// What the bus and the worker SDK share with the control plane lives below it,
// in module base (process plumbing, test harnesses) and module bus (the
// transport, its topology and routing), so a worker never depends on core.
//
// Its public packages, for the services and tools of this repository:
//
//   - ledger: the system of record (requests, jobs, steps, attempts, the audit
//     trail, the outbox, dead letters) and the transaction every state change
//     commits in;
//   - engine: the job state machine, run inside ledger transactions;
//   - workflow: the workflow language (YAML DAGs, templates, CEL conditions);
//   - runbook: the runbook language and its store, with the views the
//     orchestrator and the scheduler change in the ledger's transaction;
//   - registry: stored workflow definitions and the handler catalog;
//   - config: live configuration (global, per tenant, pauses), watched;
//   - breaker: the circuit breakers that hold dispatch to a failing service;
//   - schema: the control plane's migration sets, in one list;
//   - bootstrap: what every service's Run opens first (pool and migrations,
//     live configuration, ledger, bus, topology) and serves with;
//   - apistatus: the one mapping from these packages' errors to the gRPC
//     status and ErrorInfo reason an API answers.
//
// Packages under internal/ (yamlnode, the YAML node walker; braces, the {{ }}
// scanner) serve core's own packages and nothing outside it.
package core
