// Package core is the root of Lucius's control-plane module: the ledger, the
// workflow and runbook engines, live configuration, the handler registry and
// circuit breakers. Services import its packages; it imports no service.
// What the bus and the worker SDK share with the control plane lives below it,
// in module base (process plumbing, test harnesses) and module bus (the
// transport, its topology and routing), so a worker never depends on core.
// Packages under internal/ (the YAML node walker, the {{ }} scanner) serve
// core's own packages and nothing outside it.
package core
