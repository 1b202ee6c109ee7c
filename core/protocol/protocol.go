// Package protocol loads the protocols that map a request_type to its ordered
// steps. Protocols are data (YAML files), not code: adding a request type is a
// new file. Each step names the platform service that owns it and the payload
// fields it requires, which the gateway checks before accepting a command.
//
//	protocol_id: OCR_EMBEDDING_SIS
//	version: 1
//	steps:
//	  - id: sis
//	    type: SIS
//	    service: sis
//	    max_attempts: 3            # default 3
//	    ack_timeout_seconds: 30    # default 30
//	    payload:
//	      prompt_set: {type: list, items: string, required: true, min_items: 1}
package protocol

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"regexp"
	"sort"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

//go:embed protocols/*.yaml
var builtin embed.FS

// Defaults for steps that do not set them.
const (
	DefaultMaxAttempts = 3
	DefaultAckTimeout  = 30 * time.Second
)

// Protocol is an ordered list of steps run for one request type.
type Protocol struct {
	ID          string `yaml:"protocol_id"`
	Version     int    `yaml:"version"`
	Description string `yaml:"description"`
	Steps       []Step `yaml:"steps"`
}

// Step is one unit of work owned by one platform service.
type Step struct {
	ID                string               `yaml:"id"`
	Type              string               `yaml:"type"`
	Service           string               `yaml:"service"`
	MaxAttempts       int                  `yaml:"max_attempts"`
	AckTimeoutSeconds int                  `yaml:"ack_timeout_seconds"`
	Payload           map[string]FieldRule `yaml:"payload"`
}

// AckTimeout is the time a worker has to acknowledge a directive.
func (s Step) AckTimeout() time.Duration { return time.Duration(s.AckTimeoutSeconds) * time.Second }

// Registry holds protocols by id (= request_type).
type Registry struct {
	byID map[string]*Protocol
}

var (
	idPattern      = regexp.MustCompile(`^[A-Z][A-Z0-9_]{0,63}$`)
	stepIDPattern  = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,63}$`)
	servicePattern = regexp.MustCompile(`^[a-z][a-z0-9-]{0,62}$`)
)

// BuiltinFiles are the YAML files of the built-in protocols.
func BuiltinFiles() fs.FS {
	sub, _ := fs.Sub(builtin, "protocols")
	return sub
}

// Builtin returns the protocols shipped with Lucius (OCR, EMBEDDING, SIS and
// their compositions).
func Builtin() *Registry {
	r, err := Load(BuiltinFiles())
	if err != nil {
		panic(fmt.Sprintf("built-in protocols are invalid: %v", err))
	}
	return r
}

// Load reads every *.yaml file at the root of fsys. Any invalid file fails the
// whole load: a half-loaded registry would accept commands it cannot run.
func Load(fsys fs.FS) (*Registry, error) {
	names, err := fs.Glob(fsys, "*.yaml")
	if err != nil {
		return nil, err
	}
	r := &Registry{byID: map[string]*Protocol{}}
	var errs []error
	for _, name := range names {
		data, err := fs.ReadFile(fsys, name)
		if err != nil {
			return nil, err
		}
		p, err := Parse(path.Base(name), data)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if _, dup := r.byID[p.ID]; dup {
			errs = append(errs, fmt.Errorf("%s: protocol %s is defined twice", name, p.ID))
			continue
		}
		r.byID[p.ID] = p
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if len(r.byID) == 0 {
		return nil, errors.New("no protocols found (*.yaml)")
	}
	return r, nil
}

// Parse decodes and validates one protocol file. Errors name the file and the
// line and column of the offending node.
func Parse(file string, data []byte) (*Protocol, error) {
	var root yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&root); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	var p Protocol
	strict := yaml.NewDecoder(bytes.NewReader(data))
	strict.KnownFields(true)
	if err := strict.Decode(&p); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	v := validator{file: file, root: &root}
	v.protocol(&p)
	if len(v.errs) > 0 {
		return nil, errors.Join(v.errs...)
	}
	for i := range p.Steps {
		if p.Steps[i].MaxAttempts == 0 {
			p.Steps[i].MaxAttempts = DefaultMaxAttempts
		}
		if p.Steps[i].AckTimeoutSeconds == 0 {
			p.Steps[i].AckTimeoutSeconds = int(DefaultAckTimeout / time.Second)
		}
	}
	return &p, nil
}

// Lookup finds the protocol for a request type.
func (r *Registry) Lookup(requestType string) (*Protocol, bool) {
	p, ok := r.byID[requestType]
	return p, ok
}

// IDs lists the known request types, sorted.
func (r *Registry) IDs() []string {
	ids := make([]string, 0, len(r.byID))
	for id := range r.byID {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// Services lists every service that owns a step of some protocol, sorted.
func (r *Registry) Services() []string {
	seen := map[string]bool{}
	for _, p := range r.byID {
		for _, s := range p.Steps {
			seen[s.Service] = true
		}
	}
	out := make([]string, 0, len(seen))
	for s := range seen {
		out = append(out, s)
	}
	sort.Strings(out)
	return out
}

type validator struct {
	file string
	root *yaml.Node
	errs []error
}

// fail records an error located at the YAML node found by keys (mapping keys or
// sequence indexes as "0", "1"...), or the deepest node that exists.
func (v *validator) fail(keys []string, format string, args ...any) {
	line, col := locate(v.root, keys)
	v.errs = append(v.errs, fmt.Errorf("%s:%d:%d: %s", v.file, line, col, fmt.Sprintf(format, args...)))
}

func (v *validator) protocol(p *Protocol) {
	if !idPattern.MatchString(p.ID) {
		v.fail([]string{"protocol_id"}, "protocol_id %q must match %s", p.ID, idPattern)
	}
	if p.Version < 1 {
		v.fail([]string{"version"}, "version must be 1 or more")
	}
	if len(p.Steps) == 0 {
		v.fail([]string{"steps"}, "a protocol needs at least one step")
	}
	seen := map[string]bool{}
	for i, s := range p.Steps {
		at := func(k ...string) []string { return append([]string{"steps", fmt.Sprint(i)}, k...) }
		if !stepIDPattern.MatchString(s.ID) {
			v.fail(at("id"), "step id %q must match %s", s.ID, stepIDPattern)
		}
		if seen[s.ID] {
			v.fail(at("id"), "step id %q is used twice", s.ID)
		}
		seen[s.ID] = true
		if !idPattern.MatchString(s.Type) {
			v.fail(at("type"), "step type %q must match %s", s.Type, idPattern)
		}
		if !servicePattern.MatchString(s.Service) {
			v.fail(at("service"), "service %q must match %s", s.Service, servicePattern)
		}
		if s.MaxAttempts < 0 || s.MaxAttempts > 10 {
			v.fail(at("max_attempts"), "max_attempts must be between 1 and 10")
		}
		if s.AckTimeoutSeconds < 0 || s.AckTimeoutSeconds > 3600 {
			v.fail(at("ack_timeout_seconds"), "ack_timeout_seconds must be between 1 and 3600")
		}
		for field, rule := range s.Payload {
			if msg := rule.check(); msg != "" {
				v.fail(at("payload", field), "payload field %q: %s", field, msg)
			}
		}
	}
}

// locate walks the document to the node named by keys and returns its position.
func locate(root *yaml.Node, keys []string) (line, col int) {
	n := root
	if n.Kind == yaml.DocumentNode && len(n.Content) > 0 {
		n = n.Content[0]
	}
	line, col = n.Line, n.Column
	for _, k := range keys {
		var next *yaml.Node
		switch n.Kind {
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				if n.Content[i].Value == k {
					next = n.Content[i+1]
					if next.Kind == yaml.ScalarNode {
						next = n.Content[i] // point at the key of a scalar value
					}
					break
				}
			}
		case yaml.SequenceNode:
			var idx int
			if _, err := fmt.Sscan(k, &idx); err == nil && idx < len(n.Content) {
				next = n.Content[idx]
			}
		}
		if next == nil {
			break
		}
		n = next
		line, col = n.Line, n.Column
	}
	return line, col
}

// String describes the protocol's steps, e.g. "OCR → EMBEDDING → SIS".
func (p *Protocol) String() string {
	types := make([]string, len(p.Steps))
	for i, s := range p.Steps {
		types[i] = s.Type
	}
	return strings.Join(types, " → ")
}

// LoadDirOrBuiltin loads the protocols in dir, or the built-in ones when dir is empty.
func LoadDirOrBuiltin(dir string) (*Registry, error) {
	if dir == "" {
		return Builtin(), nil
	}
	r, err := Load(os.DirFS(dir))
	if err != nil {
		return nil, fmt.Errorf("protocols in %s: %w", dir, err)
	}
	return r, nil
}
