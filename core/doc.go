// Package core is the root of Lucius's shared module: the pieces every service
// uses (bus, ledger, routing, protocols, telemetry, configuration). Services import
// its packages; it imports no service.
package core
