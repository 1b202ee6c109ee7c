// Package schema names the control plane's migration sets in one place:
// every service of the control plane (and `lucius migrate`) applies the
// ledger's, the live configuration's and the runbooks' tables, then its own
// and its transport's.
package schema

import (
	"github.com/lucius-platform/lucius/base/migrate"
	"github.com/lucius-platform/lucius/core/config"
	"github.com/lucius-platform/lucius/core/ledger"
	"github.com/lucius-platform/lucius/core/runbook"
)

// Sets are the control plane's migration sets in the order they apply,
// followed by more (a service's own, the bus's).
func Sets(more ...migrate.Set) []migrate.Set {
	return append([]migrate.Set{ledger.Migrations, config.Migrations, runbook.Migrations}, more...)
}
