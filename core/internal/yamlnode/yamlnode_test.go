package yamlnode

import (
	"fmt"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// parse reads src into its document's top node.
func parse(t testing.TB, src string) *yaml.Node {
	t.Helper()
	var root yaml.Node
	if err := yaml.Unmarshal([]byte(src), &root); err != nil {
		t.Fatal(err)
	}
	return Document(&root)
}

// problems lists the lines of p's error, or none.
func problems(p *Problems) []string {
	if err := p.Err(); err != nil {
		return strings.Split(err.Error(), "\n")
	}
	return nil
}

func equal(a, b []string) bool { return strings.Join(a, "\n") == strings.Join(b, "\n") }

func TestWhereIsFileLineColumn(t *testing.T) {
	t.Parallel()
	m := parse(t, "a: 1\nbb:\n  c: x\n")
	tests := []struct {
		n    *yaml.Node
		want string
	}{
		{m, "f.yaml:1:1"},
		{Key(m, "bb"), "f.yaml:2:1"},
		{Value(Value(m, "bb"), "c"), "f.yaml:3:6"},
		{nil, "f.yaml:0:0"},
	}
	for _, tt := range tests {
		if got := Where("f.yaml", tt.n); got != tt.want {
			t.Errorf("Where = %q, want %q", got, tt.want)
		}
	}
}

func TestProblemsJoinsEveryProblemInOrder(t *testing.T) {
	t.Parallel()
	m := parse(t, "a: 1\nb: 2\n")
	p := &Problems{File: "f.yaml"}
	if p.Err() != nil || p.Len() != 0 {
		t.Fatalf("no problems: Err %v, Len %d", p.Err(), p.Len())
	}
	p.At(Value(m, "b"), "b is %d", 2)
	p.At(Key(m, "a"), "a is bad")
	p.At(nil, "somewhere")
	want := []string{"f.yaml:2:4: b is 2", "f.yaml:1:1: a is bad", "f.yaml:0:0: somewhere"}
	if got := problems(p); !equal(got, want) || p.Len() != 3 {
		t.Fatalf("problems %q (Len %d), want %q", got, p.Len(), want)
	}
}

func TestProblemsPastMaxAreCountedAtTheLastPosition(t *testing.T) {
	t.Parallel()
	m := parse(t, "- a\n- b\n- c\n- d\n")
	for _, tt := range []struct {
		max, report int
		want        []string
	}{
		{2, 2, []string{"f.yaml:1:3: item a", "f.yaml:2:3: item b"}},
		{2, 3, []string{"f.yaml:1:3: item a", "f.yaml:2:3: item b", "f.yaml:3:3: and 1 more problems"}},
		{2, 4, []string{"f.yaml:1:3: item a", "f.yaml:2:3: item b", "f.yaml:4:3: and 2 more problems"}},
		{0, 4, []string{"f.yaml:1:3: item a", "f.yaml:2:3: item b", "f.yaml:3:3: item c", "f.yaml:4:3: item d"}},
	} {
		p := &Problems{File: "f.yaml", Max: tt.max}
		for _, n := range m.Content[:tt.report] {
			p.At(n, "item %s", n.Value)
		}
		if got := problems(p); !equal(got, tt.want) || p.Len() != tt.report {
			t.Errorf("Max %d, %d reported: %q (Len %d), want %q", tt.max, tt.report, got, p.Len(), tt.want)
		}
	}
}

func TestDocumentUnwrapsOnlyDocuments(t *testing.T) {
	t.Parallel()
	var root yaml.Node
	if err := yaml.Unmarshal([]byte("a: 1\n"), &root); err != nil {
		t.Fatal(err)
	}
	if d := Document(&root); d.Kind != yaml.MappingNode {
		t.Fatalf("Document of a document is kind %v", d.Kind)
	}
	m := root.Content[0]
	if Document(m) != m {
		t.Fatal("Document of a mapping is not the mapping")
	}
	var empty yaml.Node
	if Document(&empty) != &empty {
		t.Fatal("Document of an empty node is not the node")
	}
}

func TestPairsYieldsAMappingsKeysAndValuesInOrder(t *testing.T) {
	t.Parallel()
	m := parse(t, "b: 1\na: [x]\nb: 3\n")
	for _, tt := range []struct {
		name string
		n    *yaml.Node
		stop int // break after this many pairs; 0 runs to the end
		want string
	}{
		{"every pair, repeats included", m, 0, "b=1 a=[] b=3 "},
		{"the caller may stop", m, 2, "b=1 a=[] "},
		{"a sequence has no pairs", Value(m, "a"), 0, ""},
		{"a scalar has no pairs", Value(m, "b"), 0, ""},
		{"nil has no pairs", nil, 0, ""},
	} {
		var b strings.Builder
		n := 0
		for k, v := range Pairs(tt.n) {
			if v.Kind == yaml.ScalarNode {
				fmt.Fprintf(&b, "%s=%s ", k.Value, v.Value)
			} else {
				fmt.Fprintf(&b, "%s=[] ", k.Value)
			}
			if n++; n == tt.stop {
				break
			}
		}
		if b.String() != tt.want {
			t.Errorf("%s: pairs %q, want %q", tt.name, b.String(), tt.want)
		}
	}
}

func TestKeyAndValueLookUpMappingsOnly(t *testing.T) {
	t.Parallel()
	m := parse(t, "a: 1\nb: [x, y]\na: 2\n")
	seq := Value(m, "b")
	tests := []struct {
		name      string
		m         *yaml.Node
		key       string
		wantKey   string // "line:col" of the key node, or "" for nil
		wantValue string // the value node's Value, or "" for nil
	}{
		{"present", m, "b", "2:1", ""},
		{"first of a repeated key", m, "a", "1:1", "1"},
		{"absent", m, "c", "", ""},
		{"a sequence has no keys", seq, "x", "", ""},
		{"nil", nil, "a", "", ""},
	}
	for _, tt := range tests {
		k, v := Key(tt.m, tt.key), Value(tt.m, tt.key)
		gotKey := ""
		if k != nil {
			gotKey = fmt.Sprintf("%d:%d", k.Line, k.Column)
		}
		if gotKey != tt.wantKey || (k == nil) != (v == nil) || v != nil && v.Kind == yaml.ScalarNode && v.Value != tt.wantValue {
			t.Errorf("%s: Key at %q, Value %v; want key at %q, value %q", tt.name, gotKey, v, tt.wantKey, tt.wantValue)
		}
	}
}

func TestReadFieldsReportsKeysNotAllowed(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, src string
		ok        bool
		want      []string
	}{
		{"allowed keys", "name: a\nsize: 2\n", true, nil},
		{"not a mapping: the caller words it", "- a\n", false, nil},
		{"unknown key", "name: a\ncolour: red\n", true,
			[]string{`f.yaml:2:1: thing: field "colour" is not allowed here (allowed: name, size)`}},
		{"repeated key", "name: a\nname: b\n", true,
			[]string{`f.yaml:2:1: thing: field "name" is given twice (first at line 1)`}},
		{"collection keys", "? [a]\n: 1\n? {b: c}\n: 2\n", true,
			[]string{"f.yaml:1:3: thing: keys must be plain names", "f.yaml:3:3: thing: keys must be plain names"}},
		{"problems in key order", "colour: red\nname: a\nname: b\n", true, []string{
			`f.yaml:1:1: thing: field "colour" is not allowed here (allowed: name, size)`,
			`f.yaml:3:1: thing: field "name" is given twice (first at line 2)`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := &Problems{File: "f.yaml"}
			_, ok := ReadFields(p, parse(t, tt.src), "thing", "name", "size")
			if got := problems(p); ok != tt.ok || !equal(got, tt.want) {
				t.Fatalf("ok %v, problems %q; want %v, %q", ok, got, tt.ok, tt.want)
			}
		})
	}
}

// An alias used as a key is looked up by its anchor's name, as the workflow
// parser always has (the runbook parser refuses aliases before).
func TestReadFieldsNamesAnAliasKeyByItsAnchor(t *testing.T) {
	t.Parallel()
	p := &Problems{File: "f.yaml"}
	m := parse(t, "a: {&name x: 1}\nb: {*name : 2}\n")
	f, ok := ReadFields(p, Value(m, "b"), "b", "name")
	if !ok || p.Len() != 0 || f.Value("name") == nil {
		t.Fatalf("ok %v, problems %v, name %v", ok, p.Err(), f.Value("name"))
	}
}

func TestFieldsReadTypedValues(t *testing.T) {
	t.Parallel()
	src := "s: text\nn: 42\nbig: 99999999999\nb: true\nl: [1, 2]\nnone: ~\nnum: \"42\"\nf: 1.5\nyes: yes\n"
	read := func(f Fields) string {
		s, at := f.String("s", true)
		n, nok := f.Int("n", true, 1, 100)
		b := f.Bool("b")
		l := f.List("l")
		return fmt.Sprintf("%s@%d:%d %d %v %v %d", s, at.Line, at.Column, n, nok, b, len(l))
	}
	p := &Problems{File: "f.yaml"}
	f, _ := ReadFields(p, parse(t, src), "thing", "s", "n", "big", "b", "l", "none", "num", "f", "yes")
	if got, want := read(f), "text@1:4 42 true true 2"; got != want || p.Len() != 0 {
		t.Fatalf("read %q, want %q; problems %v", got, want, p.Err())
	}

	tests := []struct {
		name string
		read func(f Fields)
		want string // the one problem, or ""
	}{
		{"absent optional string", func(f Fields) { f.String("gone", false) }, ""},
		{"absent required string at the mapping", func(f Fields) { f.String("gone", true) }, "f.yaml:1:1: thing: gone is required"},
		{"null required string at its key", func(f Fields) { f.String("none", true) }, "f.yaml:6:1: thing: none is required"},
		{"number is not a string", func(f Fields) { f.String("n", false) }, "f.yaml:2:4: thing: n must be a string"},
		{"list is not a string", func(f Fields) { f.String("l", false) }, "f.yaml:5:4: thing: l must be a string"},
		{"quoted number is not an integer", func(f Fields) { f.Int("num", false, 0, 100) }, "f.yaml:7:6: thing: num must be an integer"},
		{"float is not an integer", func(f Fields) { f.Int("f", false, 0, 100) }, "f.yaml:8:4: thing: f must be an integer"},
		{"integer out of range", func(f Fields) { f.Int("big", false, 0, 100) }, "f.yaml:3:6: thing: big must be between 0 and 100"},
		{"absent required integer", func(f Fields) { f.Int("gone", true, 0, 1) }, "f.yaml:1:1: thing: gone is required"},
		{"yes is not a YAML 1.2 boolean", func(f Fields) { f.Bool("yes") }, "f.yaml:9:6: thing: yes must be true or false"},
		{"absent boolean", func(f Fields) { f.Bool("gone") }, ""},
		{"scalar is not a list", func(f Fields) { f.List("s") }, "f.yaml:1:4: thing: s must be a list"},
		{"null list", func(f Fields) { f.List("none") }, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := &Problems{File: "f.yaml"}
			f, _ := ReadFields(p, parse(t, src), "thing", "s", "n", "big", "b", "l", "none", "num", "f", "yes")
			tt.read(f)
			got := strings.Join(problems(p), "\n")
			if got != tt.want {
				t.Fatalf("problems %q, want %q", got, tt.want)
			}
		})
	}
}

func TestFieldsSayWhereToReportAKey(t *testing.T) {
	t.Parallel()
	p := &Problems{File: "f.yaml"}
	m := parse(t, "a: ~\nb: 1\n")
	f, _ := ReadFields(p, m, "thing", "a", "b", "c")
	for _, tt := range []struct {
		name string
		got  *yaml.Node
		want string
	}{
		{"ValueOr of a null value is the value", f.ValueOr("a"), "f.yaml:1:4"},
		{"ValueOr of an absent key is the mapping", f.ValueOr("c"), "f.yaml:1:1"},
		{"Key of a present key", f.Key("b"), "f.yaml:2:1"},
		{"Value of a null value", f.Value("a"), "f.yaml:0:0"},
	} {
		if got := Where("f.yaml", tt.got); got != tt.want {
			t.Errorf("%s: at %s, want %s", tt.name, got, tt.want)
		}
	}
	f.Label = "thing a"
	f.Errorf(f.Key("b"), "relabelled %d", 1)
	if got := problems(p); !equal(got, []string{"f.yaml:2:1: thing a: relabelled 1"}) {
		t.Fatalf("problems %q", got)
	}
}

// FuzzReadFields: on any YAML, reading a mapping and every typed field never
// panics, each problem carries the file and a position, Len counts them, and
// a value read without a problem has the type asked for.
func FuzzReadFields(f *testing.F) {
	f.Add("name: a\nsize: 2\nok: true\nitems: [1, 2]\n")
	f.Add("name: a\nname: b\n? [x]\n: 1\ncolour: red\n")
	f.Add("- a\n- b\n")
	f.Add("a: &x {name: 1}\nb: *x\n")
	f.Add("name: ~\nsize: 99999999999999999999\nok: yes\n")
	allowed := []string{"name", "size", "ok", "items"}
	f.Fuzz(func(t *testing.T, src string) {
		var root yaml.Node
		if yaml.Unmarshal([]byte(src), &root) != nil {
			return
		}
		p := &Problems{File: "fuzz.yaml"}
		doc := Document(&root)
		fields, ok := ReadFields(p, doc, "thing", allowed...)
		if !ok {
			if doc.Kind == yaml.MappingNode || p.Len() != 0 {
				t.Fatalf("ok false on kind %v with %d problems", doc.Kind, p.Len())
			}
			return
		}
		for _, key := range allowed {
			if k := fields.Key(key); k != nil && Key(doc, key) != k {
				t.Fatalf("Fields.Key(%q) is not the first key node", key)
			}
			before := p.Len()
			if s, at := fields.String(key, true); p.Len() == before && (at.ShortTag() != "!!str" || s != at.Value) {
				t.Fatalf("String(%q) = %q from %s", key, s, at.ShortTag())
			}
			if n, ok := fields.Int(key, false, -5, 5); ok && (n < -5 || n > 5) {
				t.Fatalf("Int(%q) = %d out of range", key, n)
			}
			fields.Bool(key)
			fields.List(key)
		}
		lines := problems(p)
		if len(lines) != p.Len() {
			t.Fatalf("%d lines for %d problems", len(lines), p.Len())
		}
		for _, line := range lines {
			if !strings.HasPrefix(line, "fuzz.yaml:") || strings.HasPrefix(line, "fuzz.yaml:0:") {
				t.Fatalf("problem without a position: %q", line)
			}
		}
	})
}
