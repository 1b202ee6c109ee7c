package main

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"path"
	"strconv"
	"text/tabwriter"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"
	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"

	"github.com/lucius-platform/lucius/base/migrate"
	"github.com/lucius-platform/lucius/bus/pgbus"
	"github.com/lucius-platform/lucius/core/schema"
)

// schemaSets are the control plane's schemas, in the order the services
// apply them. The gateway's console tables and a worker's idempotency store
// are applied by those processes at start.
var schemaSets = schema.Sets(pgbus.Migrations)

func migrateCommand(s *session) *cobra.Command {
	var databaseURL string
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Apply, inspect or roll back the database schema (operators)",
		Long: `Apply, inspect or roll back the schema of the control plane's database:
the ledger, the live configuration, runbooks and the PostgreSQL bus, each a
goose migration set with its history in its own goose_<component> table.
Services apply pending migrations at start too; run "migrate up" ahead of a
release (a Kubernetes Job) so that they find nothing to do.

The database is --database-url, else DATABASE_URL.`,
	}
	cmd.PersistentFlags().StringVar(&databaseURL, "database-url", "", "the database (default: $DATABASE_URL)")
	// withDB runs fn on the database, then prints every migration's state.
	withDB := func(cmd *cobra.Command, fn func(db *sql.DB) error) error {
		url := databaseURL
		if url == "" {
			url = os.Getenv("DATABASE_URL")
		}
		if url == "" {
			return usageErrorf("no database: pass --database-url or set DATABASE_URL")
		}
		db, err := sql.Open("pgx", url)
		if err != nil {
			return &codedError{code: exitUsage, err: err}
		}
		defer db.Close()
		if err := fn(db); err != nil {
			return err
		}
		return printStatus(cmd, s, db)
	}
	up := &cobra.Command{
		Use:   "up",
		Short: "Apply every pending migration",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withDB(cmd, func(db *sql.DB) error { return migrate.Apply(cmd.Context(), db, schemaSets...) })
		},
	}
	status := &cobra.Command{
		Use:   "status",
		Short: "List every migration with its state (applied, with when, or pending)",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withDB(cmd, func(*sql.DB) error { return nil })
		},
	}
	var component string
	downTo := &cobra.Command{
		Use:   "down-to VERSION --component NAME",
		Short: "Roll one component back to VERSION, running its migrations' Down sections newest first",
		Long: `Roll one component's schema back to VERSION (0: all of it), newest migration
first. Each migration's Down section says when it cannot restore what its Up
changed (a data migration); read them first. Stop the services that use the
schema, and run the matching release's binaries afterwards.`,
		Example: "  lucius migrate down-to 15 --component ledger",
		Args:    usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			version, err := strconv.ParseInt(args[0], 10, 64)
			if err != nil || version < 0 {
				return usageErrorf("VERSION %q: want a number ≥ 0", args[0])
			}
			set, ok := findSet(component)
			if !ok {
				return usageErrorf("--component %q: want one of %s", component, setNames())
			}
			return withDB(cmd, func(db *sql.DB) error {
				p, err := set.Provider(cmd.Context(), db)
				if err != nil {
					return err
				}
				results, err := p.DownTo(cmd.Context(), version)
				for _, r := range results {
					fmt.Fprintf(cmd.ErrOrStderr(), "%s: undid %s in %s\n", set.Component, path.Base(r.Source.Path), r.Duration.Round(time.Millisecond))
				}
				return err
			})
		},
	}
	downTo.Flags().StringVar(&component, "component", "", "the component to roll back: "+setNames())
	cmd.AddCommand(up, status, downTo)
	return cmd
}

func findSet(name string) (migrate.Set, bool) {
	for _, set := range schemaSets {
		if set.Component == name {
			return set, true
		}
	}
	return migrate.Set{}, false
}

func setNames() string {
	names := ""
	for i, set := range schemaSets {
		if i > 0 {
			names += ", "
		}
		names += set.Component
	}
	return names
}

// migrationState is one row of migrate status.
type migrationState struct {
	Component string     `json:"component" yaml:"component"`
	Version   int64      `json:"version" yaml:"version"`
	File      string     `json:"file" yaml:"file"`
	State     string     `json:"state" yaml:"state"`
	AppliedAt *time.Time `json:"applied_at,omitempty" yaml:"applied_at,omitempty"`
}

// printStatus prints every migration of every set with its state.
func printStatus(cmd *cobra.Command, s *session, db *sql.DB) error {
	p := s.printer(cmd)
	if err := p.check(); err != nil {
		return err
	}
	var rows []migrationState
	for _, set := range schemaSets {
		provider, err := set.Provider(cmd.Context(), db)
		if err != nil {
			return err
		}
		statuses, err := provider.Status(cmd.Context())
		if err != nil {
			return fmt.Errorf("status of %s: %w", set.Component, err)
		}
		for _, st := range statuses {
			row := migrationState{Component: set.Component, Version: st.Source.Version, File: path.Base(st.Source.Path), State: string(st.State)}
			if !st.AppliedAt.IsZero() {
				at := st.AppliedAt.UTC()
				row.AppliedAt = &at
			}
			rows = append(rows, row)
		}
	}
	switch p.format {
	case formatJSON:
		enc := json.NewEncoder(p.out)
		enc.SetIndent("", "  ")
		return enc.Encode(rows)
	case formatYAML:
		return yaml.NewEncoder(p.out).Encode(rows)
	}
	t := tabwriter.NewWriter(p.out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(t, "COMPONENT\tVERSION\tFILE\tSTATE\tAPPLIED")
	for _, r := range rows {
		at := ""
		if r.AppliedAt != nil {
			at = r.AppliedAt.Format(time.RFC3339)
		}
		fmt.Fprintf(t, "%s\t%d\t%s\t%s\t%s\n", r.Component, r.Version, r.File, r.State, at)
	}
	return t.Flush()
}
