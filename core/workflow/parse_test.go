package workflow

import (
	"strings"
	"testing"
	"time"
)

func builtinCatalog(t testing.TB) *HandlerCatalog {
	t.Helper()
	c := NewCatalog()
	if _, err := LoadDir(BuiltinFiles(), c); err != nil {
		t.Fatal(err)
	}
	return c
}

func TestBuiltinWorkflowsAreValid(t *testing.T) {
	t.Parallel()
	defs, err := LoadDir(BuiltinFiles(), NewCatalog())
	if err != nil {
		t.Fatal(err)
	}
	byID := map[string]*Definition{}
	for _, d := range defs {
		byID[d.ID] = d
	}
	for id, tasks := range map[string]string{
		"OCR": "ocr", "EMBEDDING": "embedding", "SIS": "sis", "OCR_EMBEDDING": "ocr,embedding",
		"OCR_EMBEDDING_SIS": "ocr,embedding,sis", "EMBEDDING_SIS": "embedding,sis",
		"raster_processing": "validate,process_fa,process_docker", "tile_mosaic": "plan,split,aggregate",
	} {
		d, ok := byID[id]
		if !ok {
			t.Fatalf("workflow %s missing", id)
		}
		var got []string
		for _, n := range d.Tasks() {
			got = append(got, n.ID)
		}
		if strings.Join(got, ",") != tasks {
			t.Errorf("%s tasks = %v, want %s", id, got, tasks)
		}
	}
	raster := byID["raster_processing"]
	if n, _ := raster.Node("validate"); n.Task.Service != "raster" {
		t.Errorf("queue: did not set the service: %+v", n.Task)
	}
	if n, _ := raster.Node("process_docker"); n.Task.Retry.MaxAttempts != 3 || n.Task.Retry.InitialDelay.Seconds() != 5 {
		t.Errorf("retry not read: %+v", n.Task.Retry)
	}
}

const validHead = "workflow_id: w\nversion: 1\n"

func TestParseRejectsInvalidDefinitions(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, yaml, want string
	}{
		{"no start", validHead + "nodes:\n  a: {type: end}\n", "exactly one start node, found 0"},
		{"two starts", validHead + "nodes:\n  s1: {type: start, next: e}\n  s2: {type: start, next: e}\n  e: {type: end}\n", "exactly one start node, found 2"},
		{"no end", validHead + "nodes:\n  s: {type: start, next: t}\n  t: {type: task, handler: OCR, next: s}\n", "at least one end node"},
		{"unknown next", validHead + "nodes:\n  s: {type: start, next: nowhere}\n  e: {type: end}\n", "w.yaml:4:20: node s: leads to unknown node \"nowhere\""},
		{"cycle", validHead + "nodes:\n  s: {type: start, next: a}\n  a:\n    type: task\n    handler: OCR\n    next: b\n  b:\n    type: task\n    handler: OCR\n    next: [a, e]\n  e: {type: end}\n", "node a: is part of a cycle"},
		{"unreachable", validHead + "nodes:\n  s: {type: start, next: e}\n  lonely:\n    type: task\n    handler: OCR\n    next: e\n  e: {type: end}\n", "w.yaml:5:3: node lonely: is not reachable from the start node s"},
		{"undeclared input", validHead + "nodes:\n  s: {type: start, next: t}\n  t:\n    type: task\n    handler: OCR\n    params:\n      x: \"{{ inputs.nope }}\"\n    next: e\n  e: {type: end}\n", "w.yaml:8:5: node t: {{ inputs.nope }} refers to undeclared input \"nope\""},
		{"downstream node in template", validHead + "nodes:\n  s: {type: start, next: a}\n  a:\n    type: task\n    handler: OCR\n    params: {x: \"{{ nodes.b.output.y }}\"}\n    next: b\n  b: {type: task, handler: OCR, next: e}\n  e: {type: end}\n", "refers to node b, which is not upstream of a"},
		{"item outside fan_out", validHead + "nodes:\n  s: {type: start, next: a}\n  a: {type: task, handler: OCR, params: {x: \"{{ item }}\"}, next: e}\n  e: {type: end}\n", "{{ item }} is only available in a fan_out's task"},
		{"unknown handler", validHead + "nodes:\n  s: {type: start, next: a}\n  a:\n    type: task\n    handler: TRANSLATE\n    next: e\n  e: {type: end}\n", "w.yaml:7:5: node a: unknown handler \"TRANSLATE\""},
		{"handler of another service", validHead + "nodes:\n  s: {type: start, next: a}\n  a: {type: task, handler: OCR, service: sis, next: e}\n  e: {type: end}\n", "handler OCR is owned by service ocr, not sis"},
		{"unknown field", validHead + "nodes:\n  s: {type: start, next: e}\n  e:\n    type: end\n    handler: OCR\n", "w.yaml:7:5: node e: field \"handler\" is not allowed here"},
		{"unknown type", validHead + "nodes:\n  s: {type: start, next: e}\n  e: {type: finish}\n", "unknown type \"finish\""},
		{"conditional without branches", validHead + "nodes:\n  s: {type: start, next: c}\n  c: {type: conditional, condition_field: \"x\"}\n  e: {type: end}\n", "a conditional needs branches"},
		{"default branch not last", validHead + "nodes:\n  s: {type: start, next: c}\n  c:\n    type: conditional\n    condition_field: x\n    branches:\n      - {default: true, next: e}\n      - {condition: \"< 1\", next: e}\n  e: {type: end}\n", "the default branch must come last"},
		{"bad condition", validHead + "nodes:\n  s: {type: start, next: c}\n  c:\n    type: conditional\n    condition_field: x\n    branches:\n      - {condition: \"< big\", next: e}\n  e: {type: end}\n", "< needs a number"},
		{"when that is not a bool", validHead + "nodes:\n  s: {type: start, next: c}\n  c:\n    type: conditional\n    condition_field: x\n    branches:\n      - {when: \"value + 1\", next: e}\n  e: {type: end}\n", "w.yaml:8:5: node c: branch 0: \"value + 1\" is a int, want a bool"},
		{"when that does not compile", validHead + "nodes:\n  s: {type: start, next: c}\n  c:\n    type: conditional\n    condition_field: x\n    branches:\n      - {when: \"value >\", next: e}\n  e: {type: end}\n", "w.yaml:8:5: node c: branch 0: ERROR: when:1:8: Syntax error"},
		{"when naming an unknown variable", validHead + "nodes:\n  s: {type: start, next: c}\n  c:\n    type: conditional\n    condition_field: x\n    branches:\n      - {when: \"size < 3\", next: e}\n  e: {type: end}\n", "undeclared reference to 'size'"},
		{"condition and when", validHead + "nodes:\n  s: {type: start, next: c}\n  c:\n    type: conditional\n    condition_field: x\n    branches:\n      - {condition: \"< 1\", when: \"value < 1\", next: e}\n  e: {type: end}\n", "has both condition and when"},
		{"fan_out without over", validHead + "nodes:\n  s: {type: start, next: f}\n  f: {type: fan_out, task: {handler: OCR}, next: e}\n  e: {type: end}\n", "a fan_out needs over"},
		{"fan_out over text", validHead + "inputs:\n  xs: {type: list}\nnodes:\n  s: {type: start, next: f}\n  f: {type: fan_out, over: \"a {{ inputs.xs }}\", task: {handler: OCR}, next: e}\n  e: {type: end}\n", "over must be a single reference"},
		{"end with next", validHead + "nodes:\n  s: {type: start, next: e}\n  e: {type: end, next: s}\n", "w.yaml:5:18: node e: field \"next\" is not allowed here"},
		{"task without next", validHead + "nodes:\n  s: {type: start, next: a}\n  a: {type: task, handler: OCR}\n  e: {type: end}\n", "a task node needs next"},
		{"bad default", validHead + "inputs:\n  n: {type: integer, default: many}\nnodes:\n  s: {type: start, next: e}\n  e: {type: end}\n", "input n: default must be an integer"},
		{"bad workflow id", "workflow_id: 9w\nversion: 1\nnodes:\n  s: {type: start, next: e}\n  e: {type: end}\n", "w.yaml:1:1: workflow_id \"9w\""},
		{"bad retry", validHead + "nodes:\n  s: {type: start, next: a}\n  a: {type: task, handler: OCR, retry: {backoff: linear}, next: e}\n  e: {type: end}\n", "retry.backoff \"linear\" must be fixed or exponential"},
		{"params a plain string", validHead + "nodes:\n  s: {type: start, next: a}\n  a: {type: task, handler: OCR, params: \"all of it\", next: e}\n  e: {type: end}\n", "params must be a map, or one {{ reference }} to an object"},
		{"params a list", validHead + "nodes:\n  s: {type: start, next: a}\n  a: {type: task, handler: OCR, params: [1, 2], next: e}\n  e: {type: end}\n", "params must be a map, or one {{ reference }} to an object"},
		{"whole params from an undeclared input", validHead + "nodes:\n  s: {type: start, next: a}\n  a: {type: task, handler: OCR, params: \"{{ inputs.p }}\", next: e}\n  e: {type: end}\n", "refers to undeclared input \"p\""},
		{"poll_timeout without poll_interval", validHead + "nodes:\n  s: {type: start, next: a}\n  a: {type: task, handler: OCR, poll_timeout: 60, next: e}\n  e: {type: end}\n", "poll_timeout needs poll_interval"},
		{"poll_timeout under poll_interval", validHead + "nodes:\n  s: {type: start, next: a}\n  a: {type: task, handler: OCR, poll_interval: 60, poll_timeout: 30, next: e}\n  e: {type: end}\n", "poll_timeout (30) must be at least poll_interval (60)"},
		{"negative poll_interval", validHead + "nodes:\n  s: {type: start, next: a}\n  a: {type: task, handler: OCR, poll_interval: -1, next: e}\n  e: {type: end}\n", "poll_interval must be between 1 and 604800 seconds"},
		{"poll_timeout over a week", validHead + "nodes:\n  s: {type: start, next: a}\n  a: {type: task, handler: OCR, poll_interval: 60, poll_timeout: 604801, next: e}\n  e: {type: end}\n", "poll_timeout must be between 1 and 604800 seconds"},
		{"poll_interval on a start", validHead + "nodes:\n  s: {type: start, next: e, poll_interval: 5}\n  e: {type: end}\n", "field \"poll_interval\" is not allowed here"},
		{"on_failure to unknown", validHead + "nodes:\n  s: {type: start, next: a}\n  a: {type: task, handler: OCR, on_failure: cleanup, next: e}\n  e: {type: end}\n", "on_failure names unknown node \"cleanup\""},
	}
	catalog := builtinCatalog(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := Parse("w.yaml", []byte(tt.yaml), catalog)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v\nwant it to contain %q", err, tt.want)
			}
		})
	}
}

func TestParseReportsEveryProblem(t *testing.T) {
	t.Parallel()
	y := validHead + "nodes:\n  s: {type: start, next: a}\n  a: {type: task, handler: NOPE, next: b}\n  b: {type: task, handler: ALSO_NOPE, next: e}\n  e: {type: end}\n"
	_, err := Parse("w.yaml", []byte(y), builtinCatalog(t))
	if err == nil || !strings.Contains(err.Error(), "NOPE") || !strings.Contains(err.Error(), "ALSO_NOPE") {
		t.Fatalf("error %v should name both unknown handlers", err)
	}
}

// FuzzParse: no input makes Parse panic, and anything it accepts has one
// start, an end, a topological order over every node, and a service per task.
func FuzzParse(f *testing.F) {
	for _, name := range []string{"raster_processing.yaml", "tile_mosaic.yaml", "OCR_EMBEDDING_SIS.yaml"} {
		data, _ := builtinFS(name)
		f.Add(data)
	}
	f.Add([]byte(validHead + "nodes:\n  s: {type: start, next: e}\n  e: {type: end}\n"))
	catalog := builtinCatalog(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		d, err := Parse("fuzz.yaml", data, catalog)
		if err != nil {
			return
		}
		if d.Start() == nil || len(d.order) != len(d.Nodes) {
			t.Fatalf("accepted a definition without start or full order")
		}
		for _, n := range d.Tasks() {
			if n.Task == nil || n.Task.Service == "" || n.Task.Retry.MaxAttempts < 1 {
				t.Fatalf("accepted task %s without service or retry", n.ID)
			}
		}
		// Evaluating the fresh job never panics.
		Evaluate(d, State{Inputs: map[string]any{}})
	})
}

func builtinFS(name string) ([]byte, error) {
	return readFile(BuiltinFiles(), name)
}

// poll_interval and poll_timeout are seconds on a task or a fan-out's task.
func TestParseReadsPollSettings(t *testing.T) {
	t.Parallel()
	src := validHead + "inputs:\n  xs: {type: list}\nnodes:\n  s: {type: start, next: a}\n" +
		"  a: {type: task, handler: OCR, poll_interval: 5, poll_timeout: 60, next: f}\n" +
		"  f: {type: fan_out, over: \"{{ inputs.xs }}\", task: {handler: OCR, poll_interval: 2}, next: b}\n" +
		"  b: {type: task, handler: OCR, next: e}\n  e: {type: end}\n"
	def, err := Parse("w.yaml", []byte(src), builtinCatalog(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		node               string
		interval, deadline time.Duration
	}{{"a", 5 * time.Second, time.Minute}, {"f", 2 * time.Second, 0}, {"b", 0, 0}} {
		n, _ := def.Node(tc.node)
		if n.Task.PollInterval != tc.interval || n.Task.PollTimeout != tc.deadline {
			t.Errorf("node %s polls every %s up to %s, want %s up to %s", tc.node, n.Task.PollInterval, n.Task.PollTimeout, tc.interval, tc.deadline)
		}
	}
}
