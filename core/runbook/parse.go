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

	"github.com/lucius-platform/lucius/core/internal/yamlnode"
)

// Parse decodes and validates a runbook. Every problem is reported, each as
// "file:line:column: message", joined into one error.
func Parse(file string, src []byte) (*Runbook, error) {
	p := &parser{problems: yamlnode.Problems{File: file, Max: maxProblems}}
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
	doc := yamlnode.Document(&root)
	p.noAliases(doc, 0)
	if err := p.problems.Err(); err != nil {
		return nil, err
	}
	rb := p.runbook(doc)
	if err := p.problems.Err(); err != nil {
		return nil, err
	}
	rb.Source = bytes.Clone(src)
	return rb, nil
}

type parser struct {
	problems yamlnode.Problems
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

var yamlLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// syntaxError turns a YAML error ("yaml: line 3: ...", no column) into ours.
func (p *parser) syntaxError(err error) error {
	msg := err.Error()
	if m := yamlLine.FindStringSubmatch(msg); m != nil {
		return fmt.Errorf("%s:%s:1: YAML: %s", p.problems.File, m[1], m[2])
	}
	return fmt.Errorf("%s:1:1: YAML: %s", p.problems.File, strings.TrimPrefix(msg, "yaml: "))
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
		p.problems.At(n, "YAML aliases (*%s) are not supported; write the value out", n.Value)
		return
	case yaml.MappingNode, yaml.SequenceNode:
		if depth++; depth > MaxDepth {
			p.problems.At(n, "YAML maps and lists nest more than %d deep here", MaxDepth)
			return
		}
	}
	for _, c := range n.Content {
		p.noAliases(c, depth)
	}
}

// mapping reads n as a mapping whose keys are among allowed, reporting
// anything else. It returns ok false when n is not a mapping at all.
func (p *parser) mapping(n *yaml.Node, label string, allowed ...string) (yamlnode.Fields, bool) {
	f, ok := yamlnode.ReadFields(&p.problems, n, label, allowed...)
	if !ok {
		p.problems.At(n, "%s must be a mapping", label)
	}
	return f, ok
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
	if rb.Name, at = top.String("name", true); rb.Name != "" && !namePattern.MatchString(rb.Name) {
		p.problems.At(at, "name %q must match %s", rb.Name, namePattern)
	}
	rb.Version, _ = top.Int("version", true, 1, MaxVersion)
	rb.Description, _ = top.String("description", false)
	if ob, at := top.String("overdue_behavior", false); ob != "" {
		if ob != OverdueRerun && ob != OverdueIgnore {
			p.problems.At(at, "overdue_behavior %q must be rerun or ignore", ob)
		} else {
			rb.OverdueBehavior = ob
		}
	}
	rb.RerunInit = top.Bool("rerun_init")

	rb.Columns = p.columns(top.Value("data_source"))
	p.vars = map[string]bool{VarMemberKey: true, VarBatchTime: true, VarBatchID: true, VarBatchStartTime: true}
	for _, c := range rb.Columns {
		p.vars[c] = true
	}
	p.stepNames = map[string]*yaml.Node{}

	for i, n := range top.List("init") {
		rb.Init = append(rb.Init, p.step(n, fmt.Sprintf("init[%d]", i), sectionInit))
	}
	phases := top.List("phases")
	if len(phases) == 0 {
		p.problems.At(top.ValueOr("phases"), "a runbook needs at least one phase")
	}
	phaseNames := map[string]*yaml.Node{}
	for i, n := range phases {
		ph, at := p.phase(n, fmt.Sprintf("phases[%d]", i))
		if first, dup := phaseNames[ph.Name]; dup && ph.Name != "" {
			p.problems.At(at, "phase name %q is already used at line %d", ph.Name, first.Line)
		} else {
			phaseNames[ph.Name] = at
		}
		rb.Phases = append(rb.Phases, ph)
	}
	if rn := top.Value("rollbacks"); rn != nil {
		p.rollbacks(rn, rb)
	}
	for i, n := range top.List("on_member_removed") {
		rb.OnMemberRemoved = append(rb.OnMemberRemoved, p.step(n, fmt.Sprintf("on_member_removed[%d]", i), sectionRemoval))
	}
	for _, ref := range p.onFailure {
		if _, ok := rb.Rollbacks[ref.name]; !ok {
			p.problems.At(ref.at, "%s: on_failure names unknown rollback %q (rollbacks: %s)", ref.label, ref.name,
				listOrNone(slices.Sorted(maps.Keys(rb.Rollbacks))))
		}
	}
	return rb
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
	items := ds.List("columns")
	if len(items) > MaxColumns {
		ds.Errorf(ds.ValueOr("columns"), "at most %d columns are allowed, found %d", MaxColumns, len(items))
		return nil
	}
	var cols []string
	seen := map[string]*yaml.Node{}
	for _, c := range items {
		if c.Kind != yaml.ScalarNode || c.ShortTag() != "!!str" {
			p.problems.At(c, "data_source: columns must be names")
			continue
		}
		if !columnPattern.MatchString(c.Value) {
			p.problems.At(c, "data_source: column %q must match %s (lowercase; the system columns start with _)", c.Value, columnPattern)
		}
		if first, dup := seen[c.Value]; dup {
			p.problems.At(c, "data_source: column %q is listed twice (first at line %d)", c.Value, first.Line)
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
	name, at := f.String("name", true)
	if name != "" {
		ph.Name = name
		if stepNamePattern.MatchString(name) {
			f.Label = "phase " + name // only a valid name labels problems: it holds no newline
		} else {
			p.problems.At(at, "%s: phase name %q must match %s", label, name, stepNamePattern)
		}
	}
	ph.OffsetMinutes, _ = f.Int("offset_minutes", true, -MaxOffsetMinutes, MaxOffsetMinutes)
	steps := f.List("steps")
	if len(steps) == 0 {
		f.Errorf(f.ValueOr("steps"), "a phase needs at least one step")
	}
	for i, s := range steps {
		ph.Steps = append(ph.Steps, p.step(s, fmt.Sprintf("%s.steps[%d]", label, i), sectionPhase))
	}
	return ph, at
}

func (p *parser) rollbacks(n *yaml.Node, rb *Runbook) {
	if n.Kind != yaml.MappingNode {
		p.problems.At(n, "rollbacks must be a mapping of rollback names to step lists")
		return
	}
	for k, v := range yamlnode.Pairs(n) {
		name := k.Value
		if k.Kind != yaml.ScalarNode || !namePattern.MatchString(name) {
			p.problems.At(k, "rollbacks: rollback name %q must match %s", name, namePattern)
			continue
		}
		if _, dup := rb.Rollbacks[name]; dup {
			p.problems.At(k, "rollbacks: rollback %q is defined twice", name)
			continue
		}
		if v.Kind != yaml.SequenceNode || len(v.Content) == 0 {
			p.problems.At(v, "rollback %s must be a list of at least one step", name)
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
	name, at := f.String("name", true)
	if name != "" {
		if !stepNamePattern.MatchString(name) {
			p.problems.At(at, "%s: step name %q must match %s", label, name, stepNamePattern)
		}
		if first, dup := p.stepNames[name]; dup {
			p.problems.At(at, "%s: step name %q is already used at line %d (step names are unique in a runbook)", label, name, first.Line)
		} else {
			p.stepNames[name] = at
		}
		s.Name = name
		if stepNamePattern.MatchString(name) {
			f.Label = "step " + name
		}
	}
	if s.WorkerID, at = f.String("worker_id", true); s.WorkerID != "" && !workerPattern.MatchString(s.WorkerID) {
		f.Errorf(at, "worker_id %q must match %s", s.WorkerID, workerPattern)
	}
	if s.Function, at = f.String("function", true); s.Function != "" && !functionPattern.MatchString(s.Function) {
		f.Errorf(at, "function %q must match %s", s.Function, functionPattern)
	}
	if v := f.Value("params"); v != nil {
		s.Params = p.params(v, f.Label, sec)
	}
	s.IsPollStep = f.Bool("is_poll_step")
	if s.IsPollStep {
		s.PollIntervalSec, _ = f.Int("poll_interval_sec", true, 1, MaxPollSeconds)
		var ok bool
		if s.PollTimeoutSec, ok = f.Int("poll_timeout_sec", true, 1, MaxPollSeconds); ok && s.PollTimeoutSec < s.PollIntervalSec {
			f.Errorf(f.Value("poll_timeout_sec"), "poll_timeout_sec (%d) must be at least poll_interval_sec (%d)", s.PollTimeoutSec, s.PollIntervalSec)
		}
	} else {
		for _, key := range []string{"poll_interval_sec", "poll_timeout_sec"} {
			if v := f.Value(key); v != nil {
				f.Errorf(f.Key(key), "%s is only allowed with is_poll_step: true", key)
			}
		}
	}
	if onFailure, at := f.String("on_failure", false); onFailure != "" {
		if sec == sectionPhase {
			s.OnFailure = onFailure
			p.onFailure = append(p.onFailure, rollbackRef{at: at, label: f.Label, name: onFailure})
		} else {
			f.Errorf(at, "on_failure is only allowed on phase steps")
		}
	}
	s.TimeoutSeconds, _ = f.Int("timeout_seconds", false, 0, MaxTimeoutSeconds)
	return s
}

// params builds the template tree of a step's params and checks every
// variable it uses against the section's scope.
func (p *parser) params(n *yaml.Node, label string, sec section) *Params {
	if n.Kind != yaml.MappingNode {
		p.problems.At(n, "%s: params must be a mapping", label)
		return nil
	}
	check := func(at *yaml.Node, path, name string) {
		switch {
		case sec == sectionInit && (name == VarBatchID || name == VarBatchStartTime):
		case sec == sectionInit && p.vars[name]:
			p.problems.At(at, "%s: %s: {{ %s }} is not available in init steps, which run once per batch (only %s and %s)",
				label, path, name, VarBatchID, VarBatchStartTime)
		case sec != sectionInit && p.vars[name]:
		default:
			p.problems.At(at, "%s: %s: {{ %s }} is not a variable (variables: %s)", label, path, name, p.varList(sec))
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
		for k, sub := range yamlnode.Pairs(n) {
			if k.Kind != yaml.ScalarNode || k.ShortTag() == "!!merge" {
				p.problems.At(k, "%s: %s: keys must be plain strings", label, path)
				continue
			}
			if seen[k.Value] {
				p.problems.At(k, "%s: %s: key %q is given twice", label, path, k.Value)
				continue
			}
			if !validText(k.Value) {
				p.problems.At(k, "%s: %s: keys must not contain NUL characters", label, path)
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
	p.problems.At(n, "%s: %s: unsupported YAML value", label, path)
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
			p.problems.At(n, "%s: %s: %v", label, path, err)
		}
		lit.literal = b
		return lit
	case "!!int":
		var i int64
		if err := n.Decode(&i); err != nil {
			p.problems.At(n, "%s: %s: %s is not a 64-bit integer", label, path, n.Value)
		}
		lit.literal = i
		return lit
	case "!!float":
		var f float64
		if err := n.Decode(&f); err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
			p.problems.At(n, "%s: %s: %s is not a finite number (params become JSON)", label, path, n.Value)
		}
		lit.literal = f
		return lit
	case "!!str", "!!timestamp": // a date is text here, as in JSON
		if !validText(n.Value) {
			p.problems.At(n, "%s: %s: NUL characters cannot be stored", label, path)
			return lit
		}
		parts, err := parseText(n.Value)
		if err != nil {
			p.problems.At(n, "%s: %s: %v", label, path, err)
			return lit
		}
		for _, pt := range parts {
			if pt.ref != "" {
				check(n, path, pt.ref)
			}
		}
		return &value{kind: kindText, parts: parts}
	}
	p.problems.At(n, "%s: %s: values tagged %s are not supported", label, path, n.ShortTag())
	return lit
}

// validText: PostgreSQL text and jsonb hold UTF-8 without NUL.
func validText(s string) bool {
	return utf8.ValidString(s) && !strings.ContainsRune(s, 0)
}
