package ledger

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// ErrDefinitionConflict means: a different definition is registered under the same version.
var ErrDefinitionConflict = errors.New("this version is already registered with different content")

// ErrHandlerConflict means: the handler is registered for another service.
var ErrHandlerConflict = errors.New("handler is owned by another service")

// StoredDefinition is a registered workflow version.
type StoredDefinition struct {
	WorkflowID   string
	Version      int
	Source       []byte
	SHA256       string
	RegisteredAt time.Time
	// RegisteredBy names who registered it (an operator's issuer#subject, or
	// where a definition loaded at start came from).
	RegisteredBy string
}

// PutDefinition registers a workflow version. Registering the same content
// again is a no-op (it reports created false); different content under an
// existing version is ErrDefinitionConflict: versions are immutable.
func (s *Store) PutDefinition(ctx context.Context, workflowID string, version int, source []byte, by string) (bool, error) {
	sum := sha256.Sum256(source)
	hash := hex.EncodeToString(sum[:])
	tag, err := s.pool.Exec(ctx, sqlPutDefinition, workflowID, version, string(source), hash, by)
	if err != nil {
		return false, fmt.Errorf("register %s@%d: %w", workflowID, version, err)
	}
	if tag.RowsAffected() == 1 {
		return true, nil
	}
	var existing string
	if err := s.pool.QueryRow(ctx, sqlDefinitionHash, workflowID, version).Scan(&existing); err != nil {
		return false, fmt.Errorf("register %s@%d: %w", workflowID, version, err)
	}
	if existing != hash {
		return false, fmt.Errorf("%s@%d: %w", workflowID, version, ErrDefinitionConflict)
	}
	return false, nil
}

// GetDefinition returns a workflow version, or the latest when version is 0.
func (s *Store) GetDefinition(ctx context.Context, workflowID string, version int) (*StoredDefinition, error) {
	d, err := scanDefinition(s.pool.QueryRow(ctx, sqlGetDefinition, workflowID, version))
	if isNoRows(err) {
		return nil, fmt.Errorf("workflow %s@%d: %w", workflowID, version, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("workflow %s@%d: %w", workflowID, version, err)
	}
	return d, nil
}

// ListDefinitions returns the latest version of up to limit workflows whose id
// sorts after afterID.
func (s *Store) ListDefinitions(ctx context.Context, afterID string, limit int) ([]*StoredDefinition, error) {
	return s.definitions(ctx, sqlListDefinitions, afterID, limit)
}

// ListVersions returns every version of a workflow, newest first.
func (s *Store) ListVersions(ctx context.Context, workflowID string) ([]*StoredDefinition, error) {
	return s.definitions(ctx, sqlListVersions, workflowID)
}

func (s *Store) definitions(ctx context.Context, query string, args ...any) ([]*StoredDefinition, error) {
	rows, err := s.pool.Query(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("list workflows: %w", err)
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (*StoredDefinition, error) { return scanDefinition(row) })
}

func scanDefinition(row pgx.Row) (*StoredDefinition, error) {
	var d StoredDefinition
	var source string
	if err := row.Scan(&d.WorkflowID, &d.Version, &source, &d.SHA256, &d.RegisteredAt, &d.RegisteredBy); err != nil {
		return nil, err
	}
	d.Source = []byte(source)
	return &d, nil
}

// Handler is one entry of the handler catalog.
type Handler struct {
	Name, Service, Description string
}

// PutHandler registers a handler. A handler keeps the service it was first
// registered with: another service is ErrHandlerConflict.
func (s *Store) PutHandler(ctx context.Context, h Handler) error {
	var service string
	err := s.pool.QueryRow(ctx, sqlPutHandler, h.Name, h.Service, h.Description).Scan(&service)
	if isNoRows(err) {
		return fmt.Errorf("handler %s: %w", h.Name, ErrHandlerConflict)
	}
	if err != nil {
		return fmt.Errorf("register handler %s: %w", h.Name, err)
	}
	return nil
}

// Handlers lists the catalog by name.
func (s *Store) Handlers(ctx context.Context) ([]Handler, error) {
	rows, err := s.pool.Query(ctx, sqlHandlers)
	if err != nil {
		return nil, fmt.Errorf("list handlers: %w", err)
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (Handler, error) {
		var h Handler
		return h, row.Scan(&h.Name, &h.Service, &h.Description)
	})
}
