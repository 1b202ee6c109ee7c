package workflow

import (
	"bytes"
	"embed"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"sync"

	"go.yaml.in/yaml/v3"
)

//go:embed builtin/*.yaml
var builtin embed.FS

// BuiltinFiles holds the workflows Lucius ships (the six OCR/EMBEDDING/SIS
// protocols and the raster and tiling examples) and handlers.yaml, the catalog
// of the handlers they use.
func BuiltinFiles() fs.FS {
	sub, _ := fs.Sub(builtin, "builtin")
	return sub
}

// HandlerCatalog maps handler names to the services that own them.
type HandlerCatalog struct {
	mu       sync.RWMutex
	handlers map[string]HandlerInfo
}

// HandlerInfo describes a handler.
type HandlerInfo struct {
	Name        string `yaml:"name"`
	Service     string `yaml:"service"`
	Description string `yaml:"description"`
}

// NewCatalog returns an empty catalog.
func NewCatalog() *HandlerCatalog { return &HandlerCatalog{handlers: map[string]HandlerInfo{}} }

// HandlerService implements Catalog.
func (c *HandlerCatalog) HandlerService(handler string) (string, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	h, ok := c.handlers[handler]
	return h.Service, ok
}

// Add registers a handler; re-adding one with another service is an error.
func (c *HandlerCatalog) Add(h HandlerInfo) error {
	if !handlerPattern.MatchString(h.Name) {
		return fmt.Errorf("handler %q: name must match %s", h.Name, handlerPattern)
	}
	if !servicePattern.MatchString(h.Service) {
		return fmt.Errorf("handler %s: service %q must match %s", h.Name, h.Service, servicePattern)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.handlers[h.Name]; ok && old.Service != h.Service {
		return fmt.Errorf("handler %s is owned by service %s, not %s", h.Name, old.Service, h.Service)
	}
	c.handlers[h.Name] = h
	return nil
}

// List returns the handlers sorted by name.
func (c *HandlerCatalog) List() []HandlerInfo {
	c.mu.RLock()
	defer c.mu.RUnlock()
	out := make([]HandlerInfo, 0, len(c.handlers))
	for _, h := range c.handlers {
		out = append(out, h)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// LoadCatalog reads a handlers file: `handlers: [{name, service, description}]`.
func (c *HandlerCatalog) LoadCatalog(file string, data []byte) error {
	var doc struct {
		Handlers []HandlerInfo `yaml:"handlers"`
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&doc); err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	for _, h := range doc.Handlers {
		if err := c.Add(h); err != nil {
			return fmt.Errorf("%s: %w", file, err)
		}
	}
	return nil
}

// CatalogFile is the name of the handlers file in a definitions directory.
const CatalogFile = "handlers.yaml"

// LoadDir reads a definitions directory: handlers.yaml (if any) into the
// catalog, then every other *.yaml as a workflow, validated against it.
func LoadDir(fsys fs.FS, catalog *HandlerCatalog) ([]*Definition, error) {
	if data, err := fs.ReadFile(fsys, CatalogFile); err == nil {
		if err := catalog.LoadCatalog(CatalogFile, data); err != nil {
			return nil, err
		}
	}
	names, err := fs.Glob(fsys, "*.yaml")
	if err != nil {
		return nil, err
	}
	var defs []*Definition
	var errs []error
	for _, name := range names {
		if path.Base(name) == CatalogFile {
			continue
		}
		data, err := fs.ReadFile(fsys, name)
		if err != nil {
			return nil, err
		}
		d, err := Parse(name, data, catalog)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		defs = append(defs, d)
	}
	if len(errs) > 0 {
		return nil, joinErrs(errs)
	}
	return defs, nil
}

func joinErrs(errs []error) error {
	var b bytes.Buffer
	for i, e := range errs {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(e.Error())
	}
	return fmt.Errorf("%s", b.String())
}

func readFile(fsys fs.FS, name string) ([]byte, error) { return fs.ReadFile(fsys, name) }

// Services lists the services owning the catalog's handlers, sorted.
func (c *HandlerCatalog) Services() []string {
	seen := map[string]bool{}
	var out []string
	for _, h := range c.List() {
		if !seen[h.Service] {
			seen[h.Service] = true
			out = append(out, h.Service)
		}
	}
	sort.Strings(out)
	return out
}

// BuiltinServices lists the services owning the built-in handlers.
func BuiltinServices() []string {
	c := NewCatalog()
	if _, err := LoadDir(BuiltinFiles(), c); err != nil {
		panic(fmt.Sprintf("built-in workflows are invalid: %v", err))
	}
	return c.Services()
}
