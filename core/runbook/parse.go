package runbook

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

// Parse decodes and validates a runbook. Every problem is reported, each as
// "file:line:column: message", joined into one error.
func Parse(file string, src []byte) (*Runbook, error) {
	p := &parser{file: file}
	if len(src) > MaxSourceBytes {
		return nil, fmt.Errorf("%s:1:1: the runbook is %d bytes, more than the limit of %d", file, len(src), MaxSourceBytes)
	}
	// The YAML is stored in a PostgreSQL text column: UTF-8 without NUL.
	if at := badByte(src); at >= 0 {
		line, col := position(src, at)
		return nil, fmt.Errorf("%s:%d:%d: the runbook must be UTF-8 text without NUL characters", file, line, col)
	}
	dec := yaml.NewDecoder(bytes.NewReader(src))
	var root yaml.Node
	if err := dec.Decode(&root); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%s:1:1: the runbook is empty", file)
		}
		return nil, p.syntaxError(err)
	}
	var second yaml.Node
	if err := dec.Decode(&second); !errors.Is(err, io.EOF) {
		if err != nil {
			return nil, p.syntaxError(err)
		}
		return nil, fmt.Errorf("%s:%d:%d: a runbook is one YAML document; found another", file, second.Line, second.Column)
	}
	doc := &root
	if doc.Kind == yaml.DocumentNode && len(doc.Content) == 1 {
		doc = doc.Content[0]
	}
	p.noAliases(doc, 0)
	if err := p.failed(); err != nil {
		return nil, err
	}
	rb := p.runbook(doc)
	if err := p.failed(); err != nil {
		return nil, err
	}
	rb.Source = bytes.Clone(src)
	return rb, nil
}

type parser struct {
	file     string
	errs     []error
	problems int // found, of which errs holds the first maxProblems
	// lastLine and lastCol are the position of the last problem found.
	lastLine, lastCol int
	// vars are the variables of member steps: columns and system variables.
	vars map[string]bool
	// stepNames maps each step name to where it was first declared.
	stepNames map[string]*yaml.Node
	// onFailure are the rollback references to check once rollbacks are read.
	onFailure []rollbackRef
}

type rollbackRef struct {
	at          *yaml.Node
	label, name string
}

// maxProblems bounds the problems one Parse reports: a broken megabyte of
// YAML should not produce a megabyte of errors.
const maxProblems = 100

func (p *parser) errAt(n *yaml.Node, format string, args ...any) {
	line, col := 0, 0
	if n != nil {
		line, col = n.Line, n.Column
	}
	p.problems++
	p.lastLine, p.lastCol = line, col
	if p.problems <= maxProblems {
		p.errs = append(p.errs, fmt.Errorf("%s:%d:%d: %s", p.file, line, col, fmt.Sprintf(format, args...)))
	}
}

// failed joins the problems found, or returns nil.
func (p *parser) failed() error {
	if p.problems > maxProblems {
		more := fmt.Errorf("%s:%d:%d: and %d more problems", p.file, p.lastLine, p.lastCol, p.problems-maxProblems)
		return errors.Join(append(p.errs, more)...)
	}
	if len(p.errs) == 0 {
		return nil
	}
	return errors.Join(p.errs...)
}

var yamlLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// syntaxError turns a YAML error ("yaml: line 3: ...", no column) into ours.
func (p *parser) syntaxError(err error) error {
	msg := err.Error()
	if m := yamlLine.FindStringSubmatch(msg); m != nil {
		return fmt.Errorf("%s:%s:1: YAML: %s", p.file, m[1], m[2])
	}
	return fmt.Errorf("%s:1:1: YAML: %s", p.file, strings.TrimPrefix(msg, "yaml: "))
}

// badByte returns the offset of the first byte that is not valid UTF-8 or is
// NUL, or -1.
func badByte(src []byte) int {
	for i := 0; i < len(src); {
		r, size := utf8.DecodeRune(src[i:])
		if r == 0 || r == utf8.RuneError && size <= 1 {
			return i
		}
		i += size
	}
	return -1
}

// position is the 1-based line and column (in runes) of a byte offset.
func position(src []byte, offset int) (int, int) {
	before := src[:offset]
	line := bytes.Count(before, []byte("\n")) + 1
	start := bytes.LastIndexByte(before, '\n') + 1
	return line, utf8.RuneCount(before[start:]) + 1
}

// noAliases rejects anchors' aliases: they would let a small document
// expand into a huge one, and runbooks do not need them. It also bounds the
// nesting of maps and lists to MaxDepth, so what reads the tree later
// (params, their templates) recurses a bounded depth.
func (p *parser) noAliases(n *yaml.Node, depth int) {
	switch n.Kind {
	case yaml.AliasNode:
		p.errAt(n, "YAML aliases (*%s) are not supported; write the value out", n.Value)
		return
	case yaml.MappingNode, yaml.SequenceNode:
		if depth++; depth > MaxDepth {
			p.errAt(n, "YAML maps and lists nest more than %d deep here", MaxDepth)
			return
		}
	}
	for _, c := range n.Content {
		p.noAliases(c, depth)
	}
}

// fields is a YAML mapping checked against the keys allowed in it.
type fields struct {
	p     *parser
	n     *yaml.Node
	label string // prefixes messages: "step send-notice", "phases[1]"
	keys  map[string]*yaml.Node
	vals  map[string]*yaml.Node
}

// mapping reads n as a mapping whose keys are among allowed, reporting
// anything else. It returns ok false when n is not a mapping at all.
func (p *parser) mapping(n *yaml.Node, label string, allowed ...string) (fields, bool) {
	f := fields{p: p, n: n, label: label, keys: map[string]*yaml.Node{}, vals: map[string]*yaml.Node{}}
	if n.Kind != yaml.MappingNode {
		p.errAt(n, "%s must be a mapping", label)
		return f, false
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			p.errAt(k, "%s: keys must be plain names", label)
			continue
		}
		if !slices.Contains(allowed, k.Value) {
			p.errAt(k, "%s: field %q is not allowed here (allowed: %s)", label, k.Value, strings.Join(allowed, ", "))
			continue
		}
		if first, dup := f.keys[k.Value]; dup {
			p.errAt(k, "%s: field %q is given twice (first at line %d)", label, k.Value, first.Line)
			continue
		}
		f.keys[k.Value], f.vals[k.Value] = k, v
	}
	return f, true
}

// value returns the value of key, or nil when absent or null.
func (f fields) value(key string) *yaml.Node {
	v := f.vals[key]
	if v == nil || v.Kind == yaml.ScalarNode && v.ShortTag() == "!!null" {
		return nil
	}
	return v
}

func (f fields) errf(at *yaml.Node, format string, args ...any) {
	f.p.errAt(at, "%s: %s", f.label, fmt.Sprintf(format, args...))
}

// missing reports a required key that is absent (at the mapping).
func (f fields) missing(key string) {
	at := f.n
	if k := f.keys[key]; k != nil { // present but null
		at = k
	}
	f.errf(at, "%s is required", key)
}

// str reads a string field; "" when absent.
func (f fields) str(key string, required bool) (string, *yaml.Node) {
	v := f.value(key)
	if v == nil {
		if required {
			f.missing(key)
		}
		return "", f.n
	}
	if v.Kind != yaml.ScalarNode || v.ShortTag() != "!!str" {
		f.errf(v, "%s must be a string", key)
		return "", v
	}
	return v.Value, v
}

// integer reads an integer field within [lo, hi]; 0 when absent.
func (f fields) integer(key string, required bool, lo, hi int) (int, bool) {
	v := f.value(key)
	if v == nil {
		if required {
			f.missing(key)
		}
		return 0, false
	}
	var n int64
	if v.Kind != yaml.ScalarNode || v.ShortTag() != "!!int" || v.Decode(&n) != nil {
		f.errf(v, "%s must be an integer", key)
		return 0, false
	}
	if n < int64(lo) || n > int64(hi) {
		f.errf(v, "%s must be between %d and %d", key, lo, hi)
		return 0, false
	}
	return int(n), true
}

// boolean reads a true/false field; false when absent.
func (f fields) boolean(key string) bool {
	v := f.value(key)
	if v == nil {
		return false
	}
	var b bool
	if v.Kind != yaml.ScalarNode || v.ShortTag() != "!!bool" || v.Decode(&b) != nil {
		f.errf(v, "%s must be true or false", key)
		return false
	}
	return b
}

// list reads a sequence field; nil when absent.
func (f fields) list(key string) []*yaml.Node {
	v := f.value(key)
	if v == nil {
		return nil
	}
	if v.Kind != yaml.SequenceNode {
		f.errf(v, "%s must be a list", key)
		return nil
	}
	return v.Content
}

var runbookKeys = []string{"name", "version", "description", "data_source", "overdue_behavior", "rerun_init",
	"init", "phases", "rollbacks", "on_member_removed"}

func (p *parser) runbook(doc *yaml.Node) *Runbook {
	rb := &Runbook{OverdueBehavior: OverdueRerun, Rollbacks: map[string][]Step{}}
	top, ok := p.mapping(doc, "runbook", runbookKeys...)
	if !ok {
		return rb
	}
	var at *yaml.Node
	if rb.Name, at = top.str("name", true); rb.Name != "" && !namePattern.MatchString(rb.Name) {
		p.errAt(at, "name %q must match %s", rb.Name, namePattern)
	}
	rb.Version, _ = top.integer("version", true, 1, MaxVersion)
	rb.Description, _ = top.str("description", false)
	if ob, at := top.str("overdue_behavior", false); ob != "" {
		if ob != OverdueRerun && ob != OverdueIgnore {
			p.errAt(at, "overdue_behavior %q must be rerun or ignore", ob)
		} else {
			rb.OverdueBehavior = ob
		}
	}
	rb.RerunInit = top.boolean("rerun_init")

	rb.Columns = p.columns(top.value("data_source"))
	p.vars = map[string]bool{VarMemberKey: true, VarBatchTime: true, VarBatchID: true, VarBatchStartTime: true}
	for _, c := range rb.Columns {
		p.vars[c] = true
	}
	p.stepNames = map[string]*yaml.Node{}

	for i, n := range top.list("init") {
		rb.Init = append(rb.Init, p.step(n, fmt.Sprintf("init[%d]", i), sectionInit))
	}
	phases := top.list("phases")
	if len(phases) == 0 {
		p.errAt(top.valueOr("phases"), "a runbook needs at least one phase")
	}
	phaseNames := map[string]*yaml.Node{}
	for i, n := range phases {
		ph, at := p.phase(n, fmt.Sprintf("phases[%d]", i))
		if first, dup := phaseNames[ph.Name]; dup && ph.Name != "" {
			p.errAt(at, "phase name %q is already used at line %d", ph.Name, first.Line)
		} else {
			phaseNames[ph.Name] = at
		}
		rb.Phases = append(rb.Phases, ph)
	}
	if rn := top.value("rollbacks"); rn != nil {
		p.rollbacks(rn, rb)
	}
	for i, n := range top.list("on_member_removed") {
		rb.OnMemberRemoved = append(rb.OnMemberRemoved, p.step(n, fmt.Sprintf("on_member_removed[%d]", i), sectionRemoval))
	}
	for _, ref := range p.onFailure {
		if _, ok := rb.Rollbacks[ref.name]; !ok {
			p.errAt(ref.at, "%s: on_failure names unknown rollback %q (rollbacks: %s)", ref.label, ref.name,
				listOrNone(slices.Sorted(maps.Keys(rb.Rollbacks))))
		}
	}
	return rb
}

// valueOr is the value node of key, or the mapping when key is absent.
func (f fields) valueOr(key string) *yaml.Node {
	if v := f.vals[key]; v != nil {
		return v
	}
	return f.n
}

func listOrNone(xs []string) string {
	if len(xs) == 0 {
		return "none"
	}
	return strings.Join(xs, ", ")
}

func (p *parser) columns(n *yaml.Node) []string {
	if n == nil {
		return nil
	}
	ds, ok := p.mapping(n, "data_source", "columns")
	if !ok {
		return nil
	}
	items := ds.list("columns")
	if len(items) > MaxColumns {
		ds.errf(ds.valueOr("columns"), "at most %d columns are allowed, found %d", MaxColumns, len(items))
		return nil
	}
	var cols []string
	seen := map[string]*yaml.Node{}
	for _, c := range items {
		if c.Kind != yaml.ScalarNode || c.ShortTag() != "!!str" {
			p.errAt(c, "data_source: columns must be names")
			continue
		}
		if !columnPattern.MatchString(c.Value) {
			p.errAt(c, "data_source: column %q must match %s (lowercase; the system columns start with _)", c.Value, columnPattern)
		}
		if first, dup := seen[c.Value]; dup {
			p.errAt(c, "data_source: column %q is listed twice (first at line %d)", c.Value, first.Line)
			continue
		}
		seen[c.Value] = c
		cols = append(cols, c.Value)
	}
	return cols
}

func (p *parser) phase(n *yaml.Node, label string) (Phase, *yaml.Node) {
	var ph Phase
	f, ok := p.mapping(n, label, "name", "offset_minutes", "steps")
	if !ok {
		return ph, n
	}
	name, at := f.str("name", true)
	if name != "" {
		ph.Name = name
		if stepNamePattern.MatchString(name) {
			f.label = "phase " + name // only a valid name labels problems: it holds no newline
		} else {
			p.errAt(at, "%s: phase name %q must match %s", label, name, stepNamePattern)
		}
	}
	ph.OffsetMinutes, _ = f.integer("offset_minutes", true, -MaxOffsetMinutes, MaxOffsetMinutes)
	steps := f.list("steps")
	if len(steps) == 0 {
		f.errf(f.valueOr("steps"), "a phase needs at least one step")
	}
	for i, s := range steps {
		ph.Steps = append(ph.Steps, p.step(s, fmt.Sprintf("%s.steps[%d]", label, i), sectionPhase))
	}
	return ph, at
}

func (p *parser) rollbacks(n *yaml.Node, rb *Runbook) {
	if n.Kind != yaml.MappingNode {
		p.errAt(n, "rollbacks must be a mapping of rollback names to step lists")
		return
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		name := k.Value
		if k.Kind != yaml.ScalarNode || !namePattern.MatchString(name) {
			p.errAt(k, "rollbacks: rollback name %q must match %s", name, namePattern)
			continue
		}
		if _, dup := rb.Rollbacks[name]; dup {
			p.errAt(k, "rollbacks: rollback %q is defined twice", name)
			continue
		}
		if v.Kind != yaml.SequenceNode || len(v.Content) == 0 {
			p.errAt(v, "rollback %s must be a list of at least one step", name)
			rb.Rollbacks[name] = nil
			continue
		}
		steps := make([]Step, 0, len(v.Content))
		for j, s := range v.Content {
			steps = append(steps, p.step(s, fmt.Sprintf("rollbacks.%s[%d]", name, j), sectionRollback))
		}
		rb.Rollbacks[name] = steps
	}
}

type section int

const (
	sectionInit section = iota
	sectionPhase
	sectionRollback
	sectionRemoval
)

var stepKeys = []string{"name", "worker_id", "function", "params", "is_poll_step", "poll_interval_sec",
	"poll_timeout_sec", "on_failure", "timeout_seconds"}

func (p *parser) step(n *yaml.Node, label string, sec section) Step {
	var s Step
	f, ok := p.mapping(n, label, stepKeys...)
	if !ok {
		return s
	}
	name, at := f.str("name", true)
	if name != "" {
		if !stepNamePattern.MatchString(name) {
			p.errAt(at, "%s: step name %q must match %s", label, name, stepNamePattern)
		}
		if first, dup := p.stepNames[name]; dup {
			p.errAt(at, "%s: step name %q is already used at line %d (step names are unique in a runbook)", label, name, first.Line)
		} else {
			p.stepNames[name] = at
		}
		s.Name = name
		if stepNamePattern.MatchString(name) {
			f.label = "step " + name
		}
	}
	if s.WorkerID, at = f.str("worker_id", true); s.WorkerID != "" && !workerPattern.MatchString(s.WorkerID) {
		f.errf(at, "worker_id %q must match %s", s.WorkerID, workerPattern)
	}
	if s.Function, at = f.str("function", true); s.Function != "" && !functionPattern.MatchString(s.Function) {
		f.errf(at, "function %q must match %s", s.Function, functionPattern)
	}
	if v := f.value("params"); v != nil {
		s.Params = p.params(v, f.label, sec)
	}
	s.IsPollStep = f.boolean("is_poll_step")
	if s.IsPollStep {
		s.PollIntervalSec, _ = f.integer("poll_interval_sec", true, 1, MaxPollSeconds)
		var ok bool
		if s.PollTimeoutSec, ok = f.integer("poll_timeout_sec", true, 1, MaxPollSeconds); ok && s.PollTimeoutSec < s.PollIntervalSec {
			f.errf(f.value("poll_timeout_sec"), "poll_timeout_sec (%d) must be at least poll_interval_sec (%d)", s.PollTimeoutSec, s.PollIntervalSec)
		}
	} else {
		for _, key := range []string{"poll_interval_sec", "poll_timeout_sec"} {
			if v := f.value(key); v != nil {
				f.errf(f.keys[key], "%s is only allowed with is_poll_step: true", key)
			}
		}
	}
	if onFailure, at := f.str("on_failure", false); onFailure != "" {
		if sec == sectionPhase {
			s.OnFailure = onFailure
			p.onFailure = append(p.onFailure, rollbackRef{at: at, label: f.label, name: onFailure})
		} else {
			f.errf(at, "on_failure is only allowed on phase steps")
		}
	}
	s.TimeoutSeconds, _ = f.integer("timeout_seconds", false, 0, MaxTimeoutSeconds)
	return s
}

// params builds the template tree of a step's params and checks every
// variable it uses against the section's scope.
func (p *parser) params(n *yaml.Node, label string, sec section) *Params {
	if n.Kind != yaml.MappingNode {
		p.errAt(n, "%s: params must be a mapping", label)
		return nil
	}
	check := func(at *yaml.Node, path, name string) {
		switch {
		case sec == sectionInit && (name == VarBatchID || name == VarBatchStartTime):
		case sec == sectionInit && p.vars[name]:
			p.errAt(at, "%s: %s: {{ %s }} is not available in init steps, which run once per batch (only %s and %s)",
				label, path, name, VarBatchID, VarBatchStartTime)
		case sec != sectionInit && p.vars[name]:
		default:
			p.errAt(at, "%s: %s: {{ %s }} is not a variable (variables: %s)", label, path, name, p.varList(sec))
		}
	}
	return &Params{root: p.value(n, label, "params", check)}
}

func (p *parser) varList(sec section) string {
	if sec == sectionInit {
		return VarBatchID + ", " + VarBatchStartTime
	}
	return strings.Join(slices.Sorted(maps.Keys(p.vars)), ", ")
}

func (p *parser) value(n *yaml.Node, label, path string, check func(at *yaml.Node, path, name string)) *value {
	switch n.Kind {
	case yaml.MappingNode:
		v := &value{kind: kindMap}
		seen := map[string]bool{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, sub := n.Content[i], n.Content[i+1]
			if k.Kind != yaml.ScalarNode || k.ShortTag() == "!!merge" {
				p.errAt(k, "%s: %s: keys must be plain strings", label, path)
				continue
			}
			if seen[k.Value] {
				p.errAt(k, "%s: %s: key %q is given twice", label, path, k.Value)
				continue
			}
			if !validText(k.Value) {
				p.errAt(k, "%s: %s: keys must not contain NUL characters", label, path)
				continue
			}
			seen[k.Value] = true
			v.keys = append(v.keys, k.Value)
			v.fields = append(v.fields, p.value(sub, label, path+"."+k.Value, check))
		}
		return v
	case yaml.SequenceNode:
		v := &value{kind: kindList}
		for i, sub := range n.Content {
			v.items = append(v.items, p.value(sub, label, path+"["+strconv.Itoa(i)+"]", check))
		}
		return v
	case yaml.ScalarNode:
		return p.scalar(n, label, path, check)
	}
	p.errAt(n, "%s: %s: unsupported YAML value", label, path)
	return &value{kind: kindLiteral}
}

func (p *parser) scalar(n *yaml.Node, label, path string, check func(at *yaml.Node, path, name string)) *value {
	lit := &value{kind: kindLiteral}
	switch n.ShortTag() {
	case "!!null":
		return lit
	case "!!bool":
		var b bool
		if err := n.Decode(&b); err != nil {
			p.errAt(n, "%s: %s: %v", label, path, err)
		}
		lit.literal = b
		return lit
	case "!!int":
		var i int64
		if err := n.Decode(&i); err != nil {
			p.errAt(n, "%s: %s: %s is not a 64-bit integer", label, path, n.Value)
		}
		lit.literal = i
		return lit
	case "!!float":
		var f float64
		if err := n.Decode(&f); err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
			p.errAt(n, "%s: %s: %s is not a finite number (params become JSON)", label, path, n.Value)
		}
		lit.literal = f
		return lit
	case "!!str", "!!timestamp": // a date is text here, as in JSON
		if !validText(n.Value) {
			p.errAt(n, "%s: %s: NUL characters cannot be stored", label, path)
			return lit
		}
		parts, err := parseText(n.Value)
		if err != nil {
			p.errAt(n, "%s: %s: %v", label, path, err)
			return lit
		}
		for _, pt := range parts {
			if pt.ref != "" {
				check(n, path, pt.ref)
			}
		}
		return &value{kind: kindText, parts: parts}
	}
	p.errAt(n, "%s: %s: values tagged %s are not supported", label, path, n.ShortTag())
	return lit
}

// validText: PostgreSQL text and jsonb hold UTF-8 without NUL.
func validText(s string) bool {
	return utf8.ValidString(s) && !strings.ContainsRune(s, 0)
}
