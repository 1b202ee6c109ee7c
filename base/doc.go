// Package base is the root of the module that the control plane (core, the
// services), the bus and the worker SDK share, as River shares rivershared:
// process plumbing (env, server, auth, telemetry, loop, migrate, database,
// egress, process) and the harnesses tests use to start real dependencies
// (pgcluster and pgtest for PostgreSQL, sbtest for the Service Bus test
// broker, azuritetest for Azurite). It imports nothing of core, bus or sdk.
package base
