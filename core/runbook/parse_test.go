package runbook

import (
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"
)

func readContoso(t testing.TB) []byte {
	t.Helper()
	src, err := os.ReadFile("testdata/contoso.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return src
}

func TestParseReadsTheSpecExample(t *testing.T) {
	t.Parallel()
	src := readContoso(t)
	rb, err := Parse("contoso.yaml", src)
	if err != nil {
		t.Fatal(err)
	}
	if rb.Name != "contoso-mailbox-migration" || rb.Version != 3 || rb.Description != "Move mailboxes to Exchange Online." ||
		rb.OverdueBehavior != OverdueRerun || rb.RerunInit || string(rb.Source) != string(src) {
		t.Fatalf("header: %+v", rb)
	}
	if !reflect.DeepEqual(rb.Columns, []string{"display_name", "email", "target_database"}) {
		t.Fatalf("columns %v", rb.Columns)
	}
	if len(rb.Init) != 1 || rb.Init[0].Name != "create-endpoint" || rb.Init[0].WorkerID != "exchange" ||
		rb.Init[0].Function != "create_migration_endpoint" {
		t.Fatalf("init %+v", rb.Init)
	}
	if len(rb.Phases) != 2 || rb.Phases[0].Name != "pre-notification" || rb.Phases[0].OffsetMinutes != 7200 ||
		rb.Phases[1].Name != "migrate" || rb.Phases[1].OffsetMinutes != 0 {
		t.Fatalf("phases %+v", rb.Phases)
	}
	move, ok := rb.Step("start-mailbox-move")
	want := Step{Name: "start-mailbox-move", WorkerID: "exchange", Function: "start_mailbox_move", Params: move.Params,
		IsPollStep: true, PollIntervalSec: 60, PollTimeoutSec: 86400, OnFailure: "undo-move", TimeoutSeconds: 600}
	if !ok || !reflect.DeepEqual(move, want) {
		t.Fatalf("step start-mailbox-move = %+v, want %+v", move, want)
	}
	if got := move.Params.Vars(); !reflect.DeepEqual(got, []string{"email", "target_database"}) {
		t.Fatalf("vars %v", got)
	}
	if rbk := rb.Rollbacks["undo-move"]; len(rbk) != 1 || rbk[0].Name != "cancel-move" || rbk[0].Function != "cancel_mailbox_move" {
		t.Fatalf("rollbacks %+v", rb.Rollbacks)
	}
	if len(rb.OnMemberRemoved) != 1 || rb.OnMemberRemoved[0].Name != "notify-removed" {
		t.Fatalf("on_member_removed %+v", rb.OnMemberRemoved)
	}
	for _, name := range []string{"create-endpoint", "send-notice", "start-mailbox-move", "cancel-move", "notify-removed"} {
		if s, ok := rb.Step(name); !ok || s.Name != name {
			t.Errorf("Step(%q) = %+v, %v", name, s, ok)
		}
	}
	if _, ok := rb.Step("nope"); ok {
		t.Error("Step found an undeclared step")
	}
	if ph, ok := rb.Phase("migrate"); !ok || len(ph.Steps) != 1 {
		t.Errorf("Phase(migrate) = %+v, %v", ph, ok)
	}
	if _, ok := rb.Phase("nope"); ok {
		t.Error("Phase found an undeclared phase")
	}

	start := time.Date(2025, 3, 15, 1, 0, 0, 0, time.FixedZone("CET", 3600))
	m := Member{Key: "ann@contoso.com", BatchTime: start, Values: map[string]string{
		"display_name": "Ann", "email": "ann@contoso.com", "target_database": "DB07"}}
	notice, _ := rb.Step("send-notice")
	got, err := notice.Params.Render(MemberVars(m, 42, start))
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]any{"to": "ann@contoso.com", "subject": "Your move on 2025-03-15T00:00:00Z"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("send-notice params %v, want %v", got, want)
	}
	got, err = rb.Init[0].Params.Render(BatchVars(42, start))
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]any{"batch": "42", "starts": "2025-03-15T00:00:00Z"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("init params %v, want %v", got, want)
	}
}

func TestParseAppliesDefaults(t *testing.T) {
	t.Parallel()
	rb, err := Parse("r.yaml", []byte("name: r\nversion: 1\nphases:\n  - name: p\n    offset_minutes: 5\n    steps: [{name: s, worker_id: w, function: f}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if rb.OverdueBehavior != OverdueRerun || len(rb.Columns) != 0 || rb.Description != "" || len(rb.Init) != 0 ||
		len(rb.Rollbacks) != 0 || rb.Phases[0].Steps[0].TimeoutSeconds != 0 || rb.Phases[0].Steps[0].Params != nil {
		t.Fatalf("defaults: %+v", rb)
	}
	if got, err := rb.Phases[0].Steps[0].Params.Render(nil); err != nil || len(got) != 0 || got == nil {
		t.Fatalf("nil params render %v, %v; want {}", got, err)
	}
}

// head declares one data column; phase is a valid phases section.
const (
	head  = "name: r\nversion: 1\ndata_source: {columns: [email]}\n"
	phase = "phases:\n  - name: p\n    offset_minutes: 0\n    steps:\n      - {name: s, worker_id: w, function: f, params: {to: \"{{ email }}\"}}\n"
)

func TestParseRejectsInvalidRunbooks(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, yaml, want string
	}{
		{"unknown top-level key", head + "colour: red\n" + phase,
			`r.yaml:4:1: runbook: field "colour" is not allowed here (allowed: name, version,`},
		{"bad runbook name", "name: Contoso_Migration\nversion: 1\n" + phase,
			`r.yaml:1:7: name "Contoso_Migration" must match ^[a-z][a-z0-9-]{0,62}$`},
		{"missing name", "version: 1\n" + phase, `r.yaml:1:1: runbook: name is required`},
		{"version zero", "name: r\nversion: 0\n" + phase, `r.yaml:2:10: runbook: version must be between 1 and 2147483647`},
		{"version not a number", "name: r\nversion: three\n" + phase, `r.yaml:2:10: runbook: version must be an integer`},
		{"no phases", head + "phases: []\n", `r.yaml:4:9: a runbook needs at least one phase`},
		{"phases missing", head, `r.yaml:1:1: a runbook needs at least one phase`},
		{"duplicate phase", head + phase + "  - name: p\n    offset_minutes: 60\n    steps: [{name: t, worker_id: w, function: f}]\n",
			`r.yaml:9:11: phase name "p" is already used at line 5`},
		{"duplicate step across sections", head + "init:\n  - {name: s, worker_id: w, function: f}\n" + phase,
			`r.yaml:10:16: phases[0].steps[0]: step name "s" is already used at line 5 (step names are unique in a runbook)`},
		{"unknown variable", head + "phases:\n  - name: p\n    offset_minutes: 0\n    steps:\n      - name: s\n        worker_id: w\n        function: f\n        params:\n          to: \"{{ emial }}\"\n",
			`r.yaml:12:15: step s: params.to: {{ emial }} is not a variable (variables: _batch_id, _batch_start_time, _batch_time, _member_key, email)`},
		{"unknown variable deep in lists", head + "phases:\n  - name: p\n    offset_minutes: 0\n    steps:\n      - name: s\n        worker_id: w\n        function: f\n        params:\n          cc: [{addr: ok}, {addr: \"x {{ nobody }}\"}]\n",
			`r.yaml:12:35: step s: params.cc[1].addr: {{ nobody }} is not a variable`},
		{"member variable in init", head + "init:\n  - name: i\n    worker_id: w\n    function: f\n    params: {to: \"{{ email }}\"}\n" + phase,
			`r.yaml:8:18: step i: params.to: {{ email }} is not available in init steps, which run once per batch (only _batch_id and _batch_start_time)`},
		{"member key in init", head + "init:\n  - {name: i, worker_id: w, function: f, params: {k: \"{{ _member_key }}\"}}\n" + phase,
			`r.yaml:5:54: step i: params.k: {{ _member_key }} is not available in init steps`},
		{"unclosed template", head + "phases:\n  - name: p\n    offset_minutes: 0\n    steps:\n      - {name: s, worker_id: w, function: f, params: {to: \"{{ email\"}}\n",
			`r.yaml:8:59: step s: params.to: '{{' is not closed`},
		{"template expression", head + "phases:\n  - name: p\n    offset_minutes: 0\n    steps:\n      - {name: s, worker_id: w, function: f, params: {to: \"{{ email | upper }}\"}}\n",
			`r.yaml:8:59: step s: params.to: {{ email | upper }}: want a variable name`},
		{"on_failure names no rollback", head + "phases:\n  - name: p\n    offset_minutes: 0\n    steps:\n      - {name: s, worker_id: w, function: f, on_failure: undo}\nrollbacks:\n  other: [{name: u, worker_id: w, function: f}]\n",
			`r.yaml:8:58: step s: on_failure names unknown rollback "undo" (rollbacks: other)`},
		{"on_failure in a rollback", head + phase + "rollbacks:\n  undo:\n    - {name: u, worker_id: w, function: f, on_failure: undo}\n",
			`r.yaml:11:56: step u: on_failure is only allowed on phase steps`},
		{"poll step without interval", head + "phases:\n  - name: p\n    offset_minutes: 0\n    steps:\n      - name: s\n        worker_id: w\n        function: f\n        is_poll_step: true\n        poll_timeout_sec: 60\n",
			`r.yaml:8:9: step s: poll_interval_sec is required`},
		{"poll timeout below interval", head + "phases:\n  - name: p\n    offset_minutes: 0\n    steps:\n      - name: s\n        worker_id: w\n        function: f\n        is_poll_step: true\n        poll_interval_sec: 60\n        poll_timeout_sec: 30\n",
			`r.yaml:13:27: step s: poll_timeout_sec (30) must be at least poll_interval_sec (60)`},
		{"poll settings without is_poll_step", head + "phases:\n  - name: p\n    offset_minutes: 0\n    steps:\n      - {name: s, worker_id: w, function: f, poll_interval_sec: 5}\n",
			`r.yaml:8:46: step s: poll_interval_sec is only allowed with is_poll_step: true`},
		{"bad column", "name: r\nversion: 1\ndata_source:\n  columns: [email, Display Name, _row_id]\n" + phase,
			`r.yaml:4:20: data_source: column "Display Name" must match ^[a-z][a-z0-9_]{0,62}$`},
		{"system column", "name: r\nversion: 1\ndata_source:\n  columns: [email, _row_id]\n" + phase,
			`r.yaml:4:20: data_source: column "_row_id" must match`},
		{"duplicate column", "name: r\nversion: 1\ndata_source:\n  columns: [email, email]\n" + phase,
			`r.yaml:4:20: data_source: column "email" is listed twice (first at line 4)`},
		{"overdue behaviour", head + "overdue_behavior: skip\n" + phase, `r.yaml:4:19: overdue_behavior "skip" must be rerun or ignore`},
		{"unknown step key", head + "phases:\n  - name: p\n    offset_minutes: 0\n    steps:\n      - {name: s, worker_id: w, function: f, retries: 3}\n",
			`r.yaml:8:46: phases[0].steps[0]: field "retries" is not allowed here (allowed: name, worker_id, function,`},
		{"bad worker id", head + "phases:\n  - name: p\n    offset_minutes: 0\n    steps:\n      - {name: s, worker_id: Exchange, function: f}\n",
			`r.yaml:8:30: step s: worker_id "Exchange" must match ^[a-z][a-z0-9-]{0,62}$`},
		{"bad function", head + "phases:\n  - name: p\n    offset_minutes: 0\n    steps:\n      - {name: s, worker_id: w, function: \"rm -rf\"}\n",
			`r.yaml:8:43: step s: function "rm -rf" must match`},
		{"missing worker and function", head + "phases:\n  - name: p\n    offset_minutes: 0\n    steps:\n      - name: s\n",
			"r.yaml:8:9: step s: worker_id is required\nr.yaml:8:9: step s: function is required"},
		{"params not a mapping", head + "phases:\n  - name: p\n    offset_minutes: 0\n    steps:\n      - {name: s, worker_id: w, function: f, params: [a]}\n",
			`r.yaml:8:54: step s: params must be a mapping`},
		{"infinite number", head + "phases:\n  - name: p\n    offset_minutes: 0\n    steps:\n      - {name: s, worker_id: w, function: f, params: {n: .inf}}\n",
			`r.yaml:8:58: step s: params.n: .inf is not a finite number (params become JSON)`},
		{"rollback name", head + phase + "rollbacks:\n  Undo_Move: [{name: u, worker_id: w, function: f}]\n",
			`r.yaml:10:3: rollbacks: rollback name "Undo_Move" must match ^[a-z][a-z0-9-]{0,62}$`},
		{"empty rollback", head + phase + "rollbacks:\n  undo: []\n", `r.yaml:10:9: rollback undo must be a list of at least one step`},
		{"phase without steps", head + "phases:\n  - {name: p, offset_minutes: 0, steps: []}\n", `r.yaml:5:41: phase p: a phase needs at least one step`},
		{"phase without offset", head + "phases:\n  - name: p\n    steps: [{name: s, worker_id: w, function: f}]\n", `r.yaml:5:5: phase p: offset_minutes is required`},
		{"offset not an integer", head + "phases:\n  - name: p\n    offset_minutes: 1.5\n    steps: [{name: s, worker_id: w, function: f}]\n",
			`r.yaml:6:21: phase p: offset_minutes must be an integer`},
		{"negative timeout", head + "phases:\n  - name: p\n    offset_minutes: 0\n    steps:\n      - {name: s, worker_id: w, function: f, timeout_seconds: -1}\n",
			`r.yaml:8:63: step s: timeout_seconds must be between 0 and 604800`},
		{"rerun_init not a bool", head + "rerun_init: sometimes\n" + phase, `r.yaml:4:13: runbook: rerun_init must be true or false`},
		{"duplicate key", "name: r\nname: s\nversion: 1\n" + phase, `r.yaml:2:1: runbook: field "name" is given twice (first at line 1)`},
		{"alias", head + "phases:\n  - name: p\n    offset_minutes: &zero 0\n    steps: [{name: s, worker_id: w, function: f, timeout_seconds: *zero}]\n",
			`r.yaml:7:67: YAML aliases (*zero) are not supported`},
		{"two documents", head + phase + "---\nname: other\n", `r.yaml:9:1: a runbook is one YAML document; found another`},
		{"not a mapping", "- name: r\n", `r.yaml:1:1: runbook must be a mapping`},
		{"empty", "", `r.yaml:1:1: the runbook is empty`},
		{"syntax error", "name: r\nversion: 1\n  bad: indent\n", `r.yaml:3:1: YAML: mapping values are not allowed in this context`},
		{"not UTF-8", "name: r\ndescription: caf\xe9\n", `r.yaml:2:17: the runbook must be UTF-8 text without NUL characters`},
		{"NUL", "name: r\x00\n", `r.yaml:1:8: the runbook must be UTF-8 text without NUL characters`},
		{"NUL escape in params", head + "phases:\n  - name: p\n    offset_minutes: 0\n    steps:\n      - {name: s, worker_id: w, function: f, params: {x: \"a\\0b\"}}\n",
			`r.yaml:8:58: step s: params.x: NUL characters cannot be stored`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rb, err := Parse("r.yaml", []byte(tt.yaml))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error:\n%v\nwant it to contain:\n%s", err, tt.want)
			}
			if rb != nil {
				t.Fatalf("Parse returned a runbook with an error")
			}
		})
	}
}

func TestParseReportsEveryProblem(t *testing.T) {
	t.Parallel()
	y := "name: R\nversion: -1\ncolour: red\nphases:\n  - name: p\n    offset_minutes: 0\n    steps:\n" +
		"      - {name: s, worker_id: W, function: f, params: {a: \"{{ x }}\", b: \"{{ y }}\"}}\n" +
		"      - {name: s, worker_id: w, function: f, on_failure: nope}\n"
	_, err := Parse("r.yaml", []byte(y))
	if err == nil {
		t.Fatal("accepted")
	}
	want := []string{
		`r.yaml:3:1: runbook: field "colour" is not allowed here`,
		`r.yaml:1:7: name "R" must match`,
		`r.yaml:2:10: runbook: version must be between 1`,
		`r.yaml:8:30: step s: worker_id "W" must match`,
		`r.yaml:8:58: step s: params.a: {{ x }} is not a variable`,
		`r.yaml:8:72: step s: params.b: {{ y }} is not a variable`,
		`r.yaml:9:16: phases[0].steps[1]: step name "s" is already used at line 8`,
		`r.yaml:9:58: step s: on_failure names unknown rollback "nope" (rollbacks: none)`,
	}
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != len(want) {
		t.Fatalf("%d problems:\n%v\nwant %d", len(lines), err, len(want))
	}
	for i, w := range want {
		if !strings.HasPrefix(lines[i], w) {
			t.Errorf("problem %d = %q\nwant prefix %q", i, lines[i], w)
		}
	}
}

// FuzzParse: no input makes Parse panic, and an accepted runbook keeps every
// promise the other layers rely on.
func FuzzParse(f *testing.F) {
	f.Add(readContoso(f))
	f.Add([]byte(head + phase))
	f.Add([]byte(head + "init:\n  - {name: i, worker_id: w, function: f, params: {b: \"{{ _batch_id }}\"}}\n" + phase +
		"rollbacks:\n  undo: [{name: u, worker_id: w, function: f, is_poll_step: true, poll_interval_sec: 1, poll_timeout_sec: 2}]\n"))
	f.Fuzz(func(t *testing.T, src []byte) {
		rb, err := Parse("fuzz.yaml", src)
		if err != nil {
			for _, line := range strings.Split(err.Error(), "\n") {
				if !strings.HasPrefix(line, "fuzz.yaml:") {
					t.Fatalf("problem without a position: %q", line)
				}
			}
			return
		}
		checkInvariants(t, rb)
	})
}

func checkInvariants(t *testing.T, rb *Runbook) {
	t.Helper()
	if CheckName(rb.Name) != nil || rb.Version < 1 || rb.Version > MaxVersion || len(rb.Phases) == 0 {
		t.Fatalf("accepted header %q v%d with %d phases", rb.Name, rb.Version, len(rb.Phases))
	}
	if rb.OverdueBehavior != OverdueRerun && rb.OverdueBehavior != OverdueIgnore {
		t.Fatalf("overdue_behavior %q", rb.OverdueBehavior)
	}
	if !validText(string(rb.Source)) {
		t.Fatal("accepted a source PostgreSQL cannot store")
	}
	if table := DataTableName(rb.Name, rb.Version); checkDataTable(table) != nil {
		t.Fatalf("table name %q", table)
	}
	vars := map[string]string{VarMemberKey: "k", VarBatchTime: "t", VarBatchID: "1", VarBatchStartTime: "t"}
	for _, c := range rb.Columns {
		if CheckColumn(c) != nil {
			t.Fatalf("accepted column %q", c)
		}
		vars[c] = "v"
	}
	names := map[string]bool{}
	count := 0
	rb.eachStep(func(section string, s Step) bool {
		count++
		if names[s.Name] {
			t.Fatalf("step %q twice", s.Name)
		}
		names[s.Name] = true
		if got, ok := rb.Step(s.Name); !ok || got.Name != s.Name {
			t.Fatalf("Step(%q) not found", s.Name)
		}
		if !stepNamePattern.MatchString(s.Name) || !workerPattern.MatchString(s.WorkerID) || !functionPattern.MatchString(s.Function) {
			t.Fatalf("accepted step %+v", s)
		}
		if s.IsPollStep && (s.PollIntervalSec < 1 || s.PollTimeoutSec < s.PollIntervalSec) {
			t.Fatalf("accepted poll settings %+v", s)
		}
		if s.OnFailure != "" {
			if _, ok := rb.Rollbacks[s.OnFailure]; !ok || !strings.HasPrefix(section, "phase ") {
				t.Fatalf("on_failure %q in %s", s.OnFailure, section)
			}
		}
		scope := vars
		if section == "init" {
			scope = BatchVars(1, time.Unix(0, 0))
		}
		out, err := s.Params.Render(scope)
		if err != nil {
			t.Fatalf("step %s does not render with every variable: %v", s.Name, err)
		}
		if _, err := json.Marshal(out); err != nil {
			t.Fatalf("step %s params are not JSON: %v", s.Name, err)
		}
		return true
	})
	if count != len(names) {
		t.Fatalf("%d steps, %d names", count, len(names))
	}
	for _, ph := range rb.Phases {
		if len(ph.Steps) == 0 {
			t.Fatalf("phase %s without steps", ph.Name)
		}
		if _, ok := rb.Phase(ph.Name); !ok {
			t.Fatalf("Phase(%q) not found", ph.Name)
		}
	}
}

func TestParseBoundsTheProblemsReported(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	b.WriteString(head + phase + "rollbacks:\n")
	for i := range 150 {
		fmt.Fprintf(&b, "  Bad%d: [{name: u%d, worker_id: w, function: f}]\n", i, i)
	}
	_, err := Parse("r.yaml", []byte(b.String()))
	lines := strings.Split(fmt.Sprint(err), "\n")
	if len(lines) != maxProblems+1 || lines[maxProblems] != "r.yaml:159:3: and 50 more problems" {
		t.Fatalf("%d lines, last %q", len(lines), lines[len(lines)-1])
	}
}
