// Package registry keeps Lucius's workflow definitions and handler catalog:
// stored in the ledger (the record every gateway and orchestrator shares),
// loaded from directories at start, validated before they are stored, parsed
// once and cached by version. A job pins (workflow_id, version) at acceptance;
// registering a new version never changes a running job.
package registry

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"sort"
	"sync"
	"time"

	"github.com/lucius-platform/lucius/base/env"
	"github.com/lucius-platform/lucius/core/ledger"
	"github.com/lucius-platform/lucius/core/workflow"
)

// LatestTTL bounds how long a process keeps answering with a cached "latest
// version" of a workflow after another process registered a newer one.
const LatestTTL = 500 * time.Millisecond

// Open returns a registry holding the built-in definitions and those in dir
// (if any; with its handlers.yaml), registered now so every process started
// with the same files agrees on them.
func Open(ctx context.Context, store *ledger.Store, dir string, limits workflow.Limits) (*Registry, error) {
	reg := New(store, limits)
	if _, err := reg.Load(ctx, workflow.BuiltinFiles()); err != nil {
		return nil, fmt.Errorf("built-in workflows: %w", err)
	}
	if dir != "" {
		if _, err := reg.Load(ctx, os.DirFS(dir)); err != nil {
			return nil, fmt.Errorf("workflows in %s: %w", dir, err)
		}
	}
	return reg, nil
}

// Registry reads and writes definitions through a ledger store.
type Registry struct {
	store  *ledger.Store
	limits workflow.Limits

	mu       sync.Mutex
	versions map[string]*workflow.Definition // by Key()
	latest   map[string]latestEntry
}

type latestEntry struct {
	def *workflow.Definition
	at  time.Time
}

// New returns a registry over store whose definitions must keep within
// limits (zero fields: the defaults). Every process parsing definitions
// (gateway, orchestrators, reconciler) should be given the same limits: a
// stored definition over a process's limits does not load there, and its
// jobs fail to start.
func New(store *ledger.Store, limits workflow.Limits) *Registry {
	return &Registry{store: store, limits: limits.WithDefaults(), versions: map[string]*workflow.Definition{}, latest: map[string]latestEntry{}}
}

// Limits are the limits definitions are parsed with.
func (r *Registry) Limits() workflow.Limits { return r.limits }

// LimitsFromEnv reads workflow limits from the environment (for mains):
// LUCIUS_WORKFLOW_MAX_BYTES, LUCIUS_WORKFLOW_MAX_DEPTH,
// LUCIUS_WORKFLOW_MAX_NODES, LUCIUS_WORKFLOW_MAX_EDGES,
// LUCIUS_WORKFLOW_MAX_FANOUT and LUCIUS_WORKFLOW_MAX_EXPANSION_BYTES.
func LimitsFromEnv(e *env.Reader) workflow.Limits {
	return workflow.Limits{
		MaxSourceBytes:    e.Int("LUCIUS_WORKFLOW_MAX_BYTES", workflow.DefaultMaxSourceBytes),
		MaxDepth:          e.Int("LUCIUS_WORKFLOW_MAX_DEPTH", workflow.DefaultMaxDepth),
		MaxNodes:          e.Int("LUCIUS_WORKFLOW_MAX_NODES", workflow.DefaultMaxNodes),
		MaxEdges:          e.Int("LUCIUS_WORKFLOW_MAX_EDGES", workflow.DefaultMaxEdges),
		MaxFanOut:         e.Int("LUCIUS_WORKFLOW_MAX_FANOUT", workflow.DefaultMaxFanOut),
		MaxExpansionBytes: e.Int("LUCIUS_WORKFLOW_MAX_EXPANSION_BYTES", workflow.DefaultMaxExpansionBytes),
	}
}

// Errors of Register.
var (
	// ErrInvalid wraps static validation errors (with file:line:column).
	ErrInvalid = errors.New("invalid workflow definition")
)

// catalog loads the handler catalog from the ledger.
func (r *Registry) catalog(ctx context.Context) (*workflow.HandlerCatalog, error) {
	hs, err := r.store.Handlers(ctx)
	if err != nil {
		return nil, err
	}
	c := workflow.NewCatalog()
	for _, h := range hs {
		if err := c.Add(workflow.HandlerInfo{Name: h.Name, Service: h.Service, Description: h.Description}); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// Validate parses and validates a definition without storing it.
func (r *Registry) Validate(ctx context.Context, file string, source []byte) (*workflow.Definition, error) {
	c, err := r.catalog(ctx)
	if err != nil {
		return nil, err
	}
	d, err := workflow.ParseWithLimits(file, source, c, r.limits)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return d, nil
}

// Register validates and stores a definition, recording by as who
// registered it. Registering identical content again is a no-op (created
// false); other content under an existing version fails with
// ledger.ErrDefinitionConflict.
func (r *Registry) Register(ctx context.Context, file string, source []byte, by string) (*workflow.Definition, bool, error) {
	d, err := r.Validate(ctx, file, source)
	if err != nil {
		return nil, false, err
	}
	created, err := r.store.PutDefinition(ctx, d.ID, d.Version, source, by)
	if err != nil {
		return nil, false, err
	}
	r.mu.Lock()
	r.versions[d.Key()] = d
	delete(r.latest, d.ID)
	r.mu.Unlock()
	return d, created, nil
}

// RegisterHandlers adds handlers to the catalog.
func (r *Registry) RegisterHandlers(ctx context.Context, hs []workflow.HandlerInfo) error {
	for _, h := range hs {
		if err := r.store.PutHandler(ctx, ledger.Handler{Name: h.Name, Service: h.Service, Description: h.Description}); err != nil {
			return err
		}
	}
	return nil
}

// Handlers lists the catalog.
func (r *Registry) Handlers(ctx context.Context) ([]workflow.HandlerInfo, error) {
	c, err := r.catalog(ctx)
	if err != nil {
		return nil, err
	}
	return c.List(), nil
}

// LoadedBy prefixes the file name a definition loaded at start is recorded
// as registered by (a version already stored keeps who registered it first).
const LoadedBy = "file:"

// Load registers a directory's handlers.yaml and every other *.yaml as a
// workflow. Any invalid file fails the load, naming every problem.
func (r *Registry) Load(ctx context.Context, fsys fs.FS) ([]*workflow.Definition, error) {
	if data, err := fs.ReadFile(fsys, workflow.CatalogFile); err == nil {
		c := workflow.NewCatalog()
		if err := c.LoadCatalog(workflow.CatalogFile, data); err != nil {
			return nil, err
		}
		if err := r.RegisterHandlers(ctx, c.List()); err != nil {
			return nil, err
		}
	}
	names, err := fs.Glob(fsys, "*.yaml")
	if err != nil {
		return nil, err
	}
	var defs []*workflow.Definition
	var errs []error
	for _, name := range names {
		if path.Base(name) == workflow.CatalogFile {
			continue
		}
		data, err := fs.ReadFile(fsys, name)
		if err != nil {
			return nil, err
		}
		d, _, err := r.Register(ctx, name, data, LoadedBy+name)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		defs = append(defs, d)
	}
	return defs, errors.Join(errs...)
}

// Get returns a workflow version, parsed and cached; version 0 means the
// latest (cached for LatestTTL).
func (r *Registry) Get(ctx context.Context, workflowID string, version int) (*workflow.Definition, error) {
	r.mu.Lock()
	if version == 0 {
		if e, ok := r.latest[workflowID]; ok && time.Since(e.at) < LatestTTL {
			r.mu.Unlock()
			return e.def, nil
		}
	} else if d, ok := r.versions[fmt.Sprintf("%s@%d", workflowID, version)]; ok {
		r.mu.Unlock()
		return d, nil
	}
	r.mu.Unlock()
	stored, err := r.store.GetDefinition(ctx, workflowID, version)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	d, ok := r.versions[fmt.Sprintf("%s@%d", stored.WorkflowID, stored.Version)]
	r.mu.Unlock()
	if !ok {
		c, err := r.catalog(ctx)
		if err != nil {
			return nil, err
		}
		if d, err = workflow.ParseWithLimits(fmt.Sprintf("%s@%d", stored.WorkflowID, stored.Version), stored.Source, c, r.limits); err != nil {
			return nil, fmt.Errorf("stored workflow %s@%d no longer validates: %w", stored.WorkflowID, stored.Version, err)
		}
	}
	r.mu.Lock()
	r.versions[d.Key()] = d
	if version == 0 {
		r.latest[workflowID] = latestEntry{def: d, at: time.Now()}
	}
	r.mu.Unlock()
	return d, nil
}

// Stored returns what the ledger holds for a workflow version (0: latest).
func (r *Registry) Stored(ctx context.Context, workflowID string, version int) (*ledger.StoredDefinition, error) {
	return r.store.GetDefinition(ctx, workflowID, version)
}

// Store is the ledger the registry reads and writes.
func (r *Registry) Store() *ledger.Store { return r.store }

// Services lists the services owning the catalog's handlers, sorted: every
// service that may receive directives, whose subscriptions must exist.
func (r *Registry) Services(ctx context.Context) ([]string, error) {
	hs, err := r.store.Handlers(ctx)
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var out []string
	for _, h := range hs {
		if !seen[h.Service] {
			seen[h.Service] = true
			out = append(out, h.Service)
		}
	}
	sort.Strings(out)
	return out, nil
}
