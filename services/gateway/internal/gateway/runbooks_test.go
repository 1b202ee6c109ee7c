package gateway

import (
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/lucius-platform/lucius/base/server"
	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
	"github.com/lucius-platform/lucius/core/runbook"
)

// mailboxRunbook uses four functions on two worker pools; send_email runs in
// a phase and on member removal (one generated workflow for both).
const mailboxRunbook = `name: mailbox-move
version: 1
description: Move mailboxes.
data_source:
  columns: [display_name, email]
init:
  - {name: create-endpoint, worker_id: exchange, function: create_migration_endpoint, params: {batch: "{{ _batch_id }}"}}
phases:
  - name: notify
    offset_minutes: -60
    steps:
      - {name: send-notice, worker_id: mailer, function: send_email, params: {to: "{{ email }}"}}
  - name: migrate
    offset_minutes: 0
    steps:
      - name: start-move
        worker_id: exchange
        function: start_mailbox_move
        params: {mailbox: "{{ email }}"}
        is_poll_step: true
        poll_interval_sec: 60
        poll_timeout_sec: 3600
        on_failure: undo
rollbacks:
  undo:
    - {name: cancel-move, worker_id: exchange, function: cancel_mailbox_move}
on_member_removed:
  - {name: notify-removed, worker_id: mailer, function: send_email, params: {to: "{{ email }}"}}
`

// mailboxVersion is mailboxRunbook as another version with another description.
func mailboxVersion(version int, description string) string {
	src := strings.Replace(mailboxRunbook, "version: 1", fmt.Sprintf("version: %d", version), 1)
	return strings.Replace(src, "Move mailboxes.", description, 1)
}

type runbookFixture struct {
	*gatewayFixture
	runbooks luciusv1.RunbookServiceClient
}

func startRunbooks(t *testing.T) runbookFixture {
	t.Helper()
	f := startGateway(t)
	return runbookFixture{gatewayFixture: f, runbooks: luciusv1.NewRunbookServiceClient(f.conn)}
}

func (f runbookFixture) apply(t *testing.T, source string) *luciusv1.Runbook {
	t.Helper()
	resp, err := f.runbooks.ApplyRunbook(f.ctx, &luciusv1.ApplyRunbookRequest{Source: source})
	if err != nil {
		t.Fatal(err)
	}
	return resp.GetRunbook()
}

// stored counts what applying a runbook writes.
func (f runbookFixture) stored(t *testing.T) [3]int {
	t.Helper()
	return [3]int{f.count(t, "runbooks"), f.count(t, "handlers"), f.count(t, "workflow_definitions")}
}

// violation is a field violation of an answer, comparable.
type violation struct{ field, reason, description string }

// grpcViolations returns the ErrorInfo reason and field violations of a gRPC error.
func grpcViolations(err error) (string, []violation) {
	var (
		reason string
		vs     []violation
	)
	for _, d := range status.Convert(err).Details() {
		switch d := d.(type) {
		case *errdetails.ErrorInfo:
			reason = d.GetReason()
		case *errdetails.BadRequest:
			for _, v := range d.GetFieldViolations() {
				vs = append(vs, violation{v.GetField(), v.GetReason(), v.GetDescription()})
			}
		}
	}
	return reason, vs
}

func TestApplyRunbookStoresActivatesAndRegistersItsSteps(t *testing.T) {
	t.Parallel()
	f := startRunbooks(t)
	code, body := f.rest(t, "POST", "/v1/runbooks", map[string]any{"source": mailboxRunbook})
	if code != http.StatusOK || body["created"] != true {
		t.Fatalf("apply: %d %v", code, body)
	}
	rb := body["runbook"].(map[string]any)
	if rb["name"] != "mailbox-move" || rb["version"] != 1.0 || rb["active"] != true || rb["source"] != mailboxRunbook ||
		rb["data_table"] != "runbook_mailbox_move_v1" || !reflect.DeepEqual(rb["columns"], []any{"display_name", "email"}) ||
		rb["overdue_behavior"] != "OVERDUE_BEHAVIOR_RERUN" || !hex64.MatchString(rb["sha256"].(string)) ||
		rb["create_time"] == nil || rb["activate_time"] == nil || len(rb["phases"].([]any)) != 2 ||
		len(rb["init"].([]any)) != 1 || len(rb["rollbacks"].([]any)) != 1 || len(rb["on_member_removed"].([]any)) != 1 {
		t.Fatalf("applied runbook %v", rb)
	}
	move := rb["phases"].([]any)[1].(map[string]any)["steps"].([]any)[0].(map[string]any)
	if move["name"] != "start-move" || move["worker_id"] != "exchange" || move["is_poll_step"] != true ||
		move["poll_timeout_sec"] != 3600.0 || move["on_failure"] != "undo" || move["workflow_id"] != workflowOf(t, mailboxRunbook, "start-move") {
		t.Fatalf("poll step %v", move)
	}

	// Every function is a handler of its pool, and every step shape a workflow.
	var owners []string
	rows, _ := f.pool.Query(f.ctx, `SELECT name || '@' || service FROM handlers WHERE service IN ('mailer', 'exchange') ORDER BY name`)
	for rows.Next() {
		var s string
		_ = rows.Scan(&s)
		owners = append(owners, s)
	}
	rows.Close()
	want := []string{"cancel_mailbox_move@exchange", "create_migration_endpoint@exchange", "send_email@mailer", "start_mailbox_move@exchange"}
	if !reflect.DeepEqual(owners, want) {
		t.Fatalf("handlers %v, want %v", owners, want)
	}
	if n := f.count(t, "workflow_definitions WHERE workflow_id LIKE 'RB\\_%'"); n != 4 {
		t.Fatalf("%d generated workflows, want 4", n)
	}
	code, wf := f.rest(t, "GET", "/v1/workflows/"+workflowOf(t, mailboxRunbook, "send-notice"), nil)
	if code != http.StatusOK {
		t.Fatalf("generated workflow: %d %v", code, wf)
	}
	if node := wf["workflow"].(map[string]any)["nodes"].([]any)[1].(map[string]any); node["handler"] != "send_email" || node["service"] != "mailer" {
		t.Fatalf("generated workflow's task %v", node)
	}

	before := f.stored(t)
	if code, body = f.rest(t, "POST", "/v1/runbooks", map[string]any{"source": mailboxRunbook}); code != http.StatusOK || body["created"] == true {
		t.Fatalf("apply the same content again: %d %v", code, body)
	}
	if after := f.stored(t); after != before {
		t.Fatalf("applying the same content again wrote rows: %v → %v", before, after)
	}
	if code, body = f.rest(t, "POST", "/v1/runbooks", map[string]any{"source": mailboxVersion(1, "Changed.")}); code != http.StatusConflict ||
		reasonOf(body) != server.Reason(luciusv1.ErrorReason_ERROR_REASON_RUNBOOK_VERSION_EXISTS) {
		t.Fatalf("same version, other content: %d %v", code, body)
	}

	// A new version takes over; the old one stays readable.
	f.apply(t, mailboxVersion(2, "Move mailboxes, again."))
	if code, body = f.rest(t, "GET", "/v1/runbooks/mailbox-move", nil); code != http.StatusOK ||
		body["runbook"].(map[string]any)["version"] != 2.0 || body["runbook"].(map[string]any)["active"] != true {
		t.Fatalf("get the active version: %d %v", code, body)
	}
	if code, body = f.rest(t, "GET", "/v1/runbooks/mailbox-move?version=1", nil); code != http.StatusOK ||
		body["runbook"].(map[string]any)["description"] != "Move mailboxes." || body["runbook"].(map[string]any)["active"] == true {
		t.Fatalf("get version 1: %d %v", code, body)
	}
	for _, path := range []string{"/v1/runbooks/nope", "/v1/runbooks/mailbox-move?version=9"} {
		if code, body = f.rest(t, "GET", path, nil); code != http.StatusNotFound || reasonOf(body) != server.Reason(luciusv1.ErrorReason_ERROR_REASON_RUNBOOK_NOT_FOUND) {
			t.Fatalf("GET %s: %d %v", path, code, body)
		}
	}
	if code, _ = f.rest(t, "GET", "/v1/runbooks/Not_A_Name", nil); code != http.StatusBadRequest {
		t.Fatalf("malformed name answered %d, want 400", code)
	}

	// By name, the latest version first, in pages.
	f.apply(t, "name: alpha\nversion: 1\nphases: [{name: p, offset_minutes: 0, steps: [{name: s, worker_id: mailer, function: send_email}]}]\n")
	var listed []string
	token := ""
	for page := 0; ; page++ {
		resp, err := f.runbooks.ListRunbooks(f.ctx, &luciusv1.ListRunbooksRequest{PageSize: 2, PageToken: token})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range resp.GetRunbooks() {
			listed = append(listed, fmt.Sprintf("%s@%d", r.GetName(), r.GetVersion()))
		}
		if token = resp.GetNextPageToken(); token == "" {
			break
		}
		if page > 3 {
			t.Fatal("paging does not end")
		}
	}
	if want := []string{"alpha@1", "mailbox-move@2", "mailbox-move@1"}; !reflect.DeepEqual(listed, want) {
		t.Fatalf("listed %v, want %v", listed, want)
	}
	if code, body = f.rest(t, "GET", "/v1/runbooks", nil); code != http.StatusOK || len(body["runbooks"].([]any)) != 3 || body["next_page_token"] != nil {
		t.Fatalf("list over REST: %d %v", code, body)
	}
	if _, err := f.runbooks.ListRunbooks(f.ctx, &luciusv1.ListRunbooksRequest{PageToken: "garbage"}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("bad page token: %v", err)
	}
}

func TestApplyRunbookReportsEveryProblemWithLineAndColumn(t *testing.T) {
	t.Parallel()
	f := startRunbooks(t)
	tests := []struct {
		name   string
		source string
		want   []string
	}{
		{
			name: "unknown key and unknown variable",
			source: "name: mailbox-move\nversion: 1\ncolour: red\nphases:\n  - name: p\n    offset_minutes: 0\n    steps:\n" +
				"      - {name: s, worker_id: w, function: f, params: {to: \"{{ emial }}\"}}\n",
			want: []string{
				`source:3:1: runbook: field "colour" is not allowed here (allowed: name, version, description, data_source, overdue_behavior, rerun_init, init, phases, rollbacks, on_member_removed)`,
				`source:8:59: step s: params.to: {{ emial }} is not a variable (variables: _batch_id, _batch_start_time, _batch_time, _member_key)`,
			},
		},
		{
			name:   "bad name, version and no phases",
			source: "name: Mailbox\nversion: 0\nphases: []\n",
			want: []string{
				`source:1:7: name "Mailbox" must match ^[a-z][a-z0-9-]{0,62}$`,
				`source:2:10: runbook: version must be between 1 and 2147483647`,
				`source:3:9: a runbook needs at least one phase`,
			},
		},
		{
			name:   "on_failure names no rollback",
			source: "name: a\nversion: 1\nphases:\n  - name: p\n    offset_minutes: 0\n    steps:\n      - {name: s, worker_id: w, function: f, on_failure: nope}\n",
			want:   []string{`source:7:58: step s: on_failure names unknown rollback "nope" (rollbacks: none)`},
		},
		{
			name: "init step using member data, and a repeated step name",
			source: "name: a\nversion: 1\ninit:\n  - {name: i, worker_id: w, function: f, params: {x: \"{{ email }}\"}}\n" +
				"phases:\n  - {name: p, offset_minutes: 0, steps: [{name: i, worker_id: w, function: f}]}\n",
			want: []string{
				`source:4:54: step i: params.x: {{ email }} is not a variable (variables: _batch_id, _batch_start_time)`,
				`source:6:49: phases[0].steps[0]: step name "i" is already used at line 4 (step names are unique in a runbook)`,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := f.runbooks.ApplyRunbook(f.ctx, &luciusv1.ApplyRunbookRequest{Source: tt.source})
			if status.Code(err) != codes.InvalidArgument {
				t.Fatalf("apply answered %v, want InvalidArgument", err)
			}
			reason, got := grpcViolations(err)
			var want []violation
			for _, d := range tt.want {
				want = append(want, violation{"source", server.Reason(luciusv1.ErrorReason_ERROR_REASON_INVALID_RUNBOOK), d})
			}
			if reason != server.Reason(luciusv1.ErrorReason_ERROR_REASON_INVALID_RUNBOOK) || !reflect.DeepEqual(got, want) {
				t.Fatalf("reason %s, violations\n%q\nwant\n%q", reason, got, want)
			}
			code, body := f.rest(t, "POST", "/v1/runbooks", map[string]any{"source": tt.source})
			if code != http.StatusBadRequest || reasonOf(body) != server.Reason(luciusv1.ErrorReason_ERROR_REASON_INVALID_RUNBOOK) || !hasFieldViolation(body, "source") ||
				!strings.Contains(body["message"].(string), tt.want[0]) {
				t.Fatalf("REST: %d %v", code, body)
			}
		})
	}
	if n := f.count(t, "runbooks"); n != 0 {
		t.Fatalf("invalid runbooks stored %d rows", n)
	}
}

func TestApplyRunbookRefusesFunctionsOfOtherPoolsAndStoresNothing(t *testing.T) {
	t.Parallel()
	f := startRunbooks(t)
	f.apply(t, mailboxRunbook) // send_email belongs to mailer now
	oneStep := func(steps string) string {
		return "name: other\nversion: 1\nphases:\n  - name: p\n    offset_minutes: 0\n    steps:\n" + steps
	}
	tests := []struct {
		name, source, reason, want string
	}{
		{
			name:   "a built-in handler on another pool",
			source: oneStep("      - {name: s, worker_id: mailer, function: OCR}\n"),
			reason: server.Reason(luciusv1.ErrorReason_ERROR_REASON_FUNCTION_OWNED_BY_OTHER_POOL),
			want:   "step s: function OCR is owned by worker pool ocr, not mailer",
		},
		{
			name:   "a function an earlier runbook gave to another pool",
			source: oneStep("      - {name: s, worker_id: exchange, function: send_email}\n"),
			reason: server.Reason(luciusv1.ErrorReason_ERROR_REASON_FUNCTION_OWNED_BY_OTHER_POOL),
			want:   "step s: function send_email is owned by worker pool mailer, not exchange",
		},
		{
			name: "one function on two pools in one runbook",
			source: oneStep("      - {name: a, worker_id: pool-a, function: fresh_function}\n" +
				"      - {name: b, worker_id: pool-b, function: fresh_function}\n"),
			reason: server.Reason(luciusv1.ErrorReason_ERROR_REASON_FUNCTION_OWNED_BY_OTHER_POOL),
			want:   "step b: function fresh_function runs on worker pool pool-b, but step a runs it on worker pool pool-a; a function belongs to one worker pool",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := f.stored(t)
			_, err := f.runbooks.ApplyRunbook(f.ctx, &luciusv1.ApplyRunbookRequest{Source: tt.source})
			reason, vs := grpcViolations(err)
			if status.Code(err) != codes.InvalidArgument || reason != tt.reason ||
				!reflect.DeepEqual(vs, []violation{{"source", tt.reason, tt.want}}) {
				t.Fatalf("apply answered %v: %s %q", err, reason, vs)
			}
			if after := f.stored(t); after != before {
				t.Fatalf("a refused runbook wrote rows (runbooks, handlers, workflows): %v → %v", before, after)
			}
			if code, body := f.rest(t, "GET", "/v1/runbooks/other", nil); code != http.StatusNotFound {
				t.Fatalf("the refused runbook is readable: %d %v", code, body)
			}
		})
	}
}

// workflowOf is the generated workflow id of a runbook's step.
func workflowOf(t *testing.T, source, step string) string {
	t.Helper()
	rb, err := runbook.Parse("r.yaml", []byte(source))
	if err != nil {
		t.Fatal(err)
	}
	s, ok := rb.Step(step)
	if !ok {
		t.Fatalf("no step %s", step)
	}
	id, _ := runbook.Workflow(s)
	return id
}

// Functions whose names read alike (send.email, send_email) are different
// handlers with workflows of their own.
func TestLookAlikeFunctionsGetWorkflowsOfTheirOwn(t *testing.T) {
	t.Parallel()
	f := startRunbooks(t)
	source := "name: alike\nversion: 1\nphases:\n  - name: p\n    offset_minutes: 0\n    steps:\n" +
		"      - {name: a, worker_id: pool-a, function: send.email}\n" +
		"      - {name: b, worker_id: pool-a, function: send_email}\n" +
		"      - {name: c, worker_id: pool-a, function: send_email, timeout_seconds: 60}\n"
	f.apply(t, source)
	ids := map[string]bool{}
	for _, step := range []string{"a", "b", "c"} {
		id := workflowOf(t, source, step)
		if ids[id] {
			t.Fatalf("two steps share workflow %s", id)
		}
		ids[id] = true
		if n := f.count(t, "workflow_definitions WHERE workflow_id = '"+id+"'"); n != 1 {
			t.Fatalf("workflow %s registered %d times", id, n)
		}
	}
}

func member(key string, batch time.Time, values map[string]string) *luciusv1.RunbookMember {
	m := &luciusv1.RunbookMember{MemberKey: key, Values: values}
	if !batch.IsZero() {
		m.BatchTime = timestamppb.New(batch)
	}
	return m
}

func TestLoadMembersCountsAndReplaces(t *testing.T) {
	t.Parallel()
	f := startRunbooks(t)
	f.apply(t, mailboxRunbook)
	batch := time.Date(2025, 3, 15, 0, 0, 0, 0, time.UTC)
	load := func(replace bool, members ...*luciusv1.RunbookMember) *luciusv1.LoadMembersResponse {
		t.Helper()
		resp, err := f.runbooks.LoadMembers(f.ctx, &luciusv1.LoadMembersRequest{Name: "mailbox-move", Members: members, Replace: replace})
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	got := load(false,
		member("a@contoso.com", batch, map[string]string{"display_name": "A", "email": "a@contoso.com"}),
		member("b@contoso.com", batch, map[string]string{"display_name": "B", "email": "b@contoso.com"}),
		member("c@contoso.com", batch, map[string]string{"email": "c@contoso.com"}))
	if want := (counts{version: 1, inserted: 3}); countsOf(got) != want {
		t.Fatalf("first load %v, want %v", countsOf(got), want)
	}
	got = load(true,
		member("a@contoso.com", batch, map[string]string{"display_name": "A", "email": "a@contoso.com"}),                   // unchanged
		member("b@contoso.com", batch.Add(24*time.Hour), map[string]string{"display_name": "B", "email": "b@contoso.com"}), // moved
		member("d@contoso.com", batch, map[string]string{"display_name": "D", "email": "d@contoso.com"}))                   // new; c is gone
	if want := (counts{version: 1, inserted: 1, updated: 1, unchanged: 1, removed: 1}); countsOf(got) != want {
		t.Fatalf("replace %v, want %v", countsOf(got), want)
	}
	var current []string
	rows, _ := f.pool.Query(f.ctx, `SELECT _member_key FROM runbook_mailbox_move_v1 WHERE _is_current ORDER BY 1`)
	for rows.Next() {
		var k string
		_ = rows.Scan(&k)
		current = append(current, k)
	}
	rows.Close()
	if want := []string{"a@contoso.com", "b@contoso.com", "d@contoso.com"}; !reflect.DeepEqual(current, want) {
		t.Fatalf("current members %v, want %v", current, want)
	}

	// Over REST, naming the version; c comes back.
	code, body := f.rest(t, "POST", "/v1/runbooks/mailbox-move/versions/1/members:load", map[string]any{
		"members": []any{map[string]any{"member_key": "c@contoso.com", "batch_time": "2025-03-15T00:00:00Z",
			"values": map[string]any{"email": "c@contoso.com"}}}})
	if code != http.StatusOK || body["version"] != 1.0 || body["updated"] != 1.0 || body["inserted"] != nil {
		t.Fatalf("load over REST: %d %v", code, body)
	}
	// Version 0 is the active version: after v2 is applied, its own (empty) table.
	f.apply(t, mailboxVersion(2, "Again."))
	if got := load(false, member("a@contoso.com", batch, nil)); countsOf(got) != (counts{version: 2, inserted: 1}) {
		t.Fatalf("load into the active version: %v", countsOf(got))
	}
	for _, path := range []string{"/v1/runbooks/nope/versions/0/members:load", "/v1/runbooks/mailbox-move/versions/7/members:load"} {
		code, body := f.rest(t, "POST", path, map[string]any{"members": []any{}})
		if code != http.StatusNotFound || reasonOf(body) != server.Reason(luciusv1.ErrorReason_ERROR_REASON_RUNBOOK_NOT_FOUND) {
			t.Fatalf("POST %s: %d %v", path, code, body)
		}
	}
	if _, err := f.runbooks.LoadMembers(f.ctx, &luciusv1.LoadMembersRequest{Name: "nope"}); status.Code(err) != codes.NotFound {
		t.Fatalf("unknown runbook over gRPC: %v", err)
	}
}

func manyMembers(n int) []*luciusv1.RunbookMember {
	out := make([]*luciusv1.RunbookMember, n)
	for i := range out {
		out[i] = &luciusv1.RunbookMember{MemberKey: fmt.Sprint(i)}
	}
	return out
}

type counts struct{ version, inserted, updated, unchanged, removed int32 }

func countsOf(r *luciusv1.LoadMembersResponse) counts {
	return counts{r.GetVersion(), r.GetInserted(), r.GetUpdated(), r.GetUnchanged(), r.GetRemoved()}
}

func TestLoadMembersNamesTheFieldsOfBadRowsAndWritesNothing(t *testing.T) {
	t.Parallel()
	f := startRunbooks(t)
	f.apply(t, mailboxRunbook)
	batch := time.Date(2025, 3, 15, 0, 0, 0, 0, time.UTC)
	ok := member("ok@contoso.com", batch, map[string]string{"email": "ok@contoso.com"})
	tests := []struct {
		name    string
		members []*luciusv1.RunbookMember
		reason  string
		want    []string // fields
	}{
		{"an unknown column", []*luciusv1.RunbookMember{ok, member("b", batch, map[string]string{"colour": "red"})},
			server.Reason(luciusv1.ErrorReason_ERROR_REASON_INVALID_MEMBERS), []string{"members[1].values.colour"}},
		{"an unknown column that is no identifier", []*luciusv1.RunbookMember{member("b", batch, map[string]string{"no such": "x"})},
			server.Reason(luciusv1.ErrorReason_ERROR_REASON_INVALID_MEMBERS), []string{`members[0].values["no such"]`}},
		{"a blank key and no batch time", []*luciusv1.RunbookMember{ok, member(" ", time.Time{}, nil)},
			server.Reason(luciusv1.ErrorReason_ERROR_REASON_INVALID_MEMBERS), []string{"members[1].member_key", "members[1].batch_time"}},
		{"a repeated key", []*luciusv1.RunbookMember{ok, ok}, server.Reason(luciusv1.ErrorReason_ERROR_REASON_INVALID_MEMBERS), []string{"members[1].member_key"}},
		{"a NUL in a value", []*luciusv1.RunbookMember{member("b", batch, map[string]string{"email": "a\x00b"})},
			server.Reason(luciusv1.ErrorReason_ERROR_REASON_INVALID_MEMBERS), []string{"members[0].values.email"}},
		{"a key too long", []*luciusv1.RunbookMember{member(strings.Repeat("k", 257), batch, nil)},
			server.Reason(luciusv1.ErrorReason_ERROR_REASON_INVALID_MEMBERS), []string{"members[0].member_key"}},
		{"an invalid batch time", []*luciusv1.RunbookMember{{MemberKey: "b", BatchTime: &timestamppb.Timestamp{Seconds: 1, Nanos: -1}}},
			server.Reason(luciusv1.ErrorReason_ERROR_REASON_INVALID_MEMBERS), []string{"members[0].batch_time"}},
		{"more than 50,000 rows", manyMembers(50_001), server.Reason(luciusv1.ErrorReason_ERROR_REASON_INVALID_ARGUMENT), []string{"members"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := f.count(t, "runbook_mailbox_move_v1")
			_, err := f.runbooks.LoadMembers(f.ctx, &luciusv1.LoadMembersRequest{Name: "mailbox-move", Members: tt.members})
			reason, vs := grpcViolations(err)
			var fields []string
			for _, v := range vs {
				fields = append(fields, v.field)
				if v.reason != tt.reason || v.description == "" {
					t.Errorf("violation %+v", v)
				}
			}
			if status.Code(err) != codes.InvalidArgument || reason != tt.reason || !reflect.DeepEqual(fields, tt.want) {
				t.Fatalf("load answered %v: %s %q, want fields %q", err, reason, vs, tt.want)
			}
			if after := f.count(t, "runbook_mailbox_move_v1"); after != before {
				t.Fatalf("a refused load wrote %d rows", after-before)
			}
		})
	}
	code, body := f.rest(t, "POST", "/v1/runbooks/mailbox-move/versions/0/members:load", map[string]any{
		"members": []any{map[string]any{"member_key": "x", "batch_time": "2025-03-15T00:00:00Z", "values": map[string]any{"colour": "red"}}}})
	if code != http.StatusBadRequest || !hasFieldViolation(body, "members[0].values.colour") || reasonOf(body) != server.Reason(luciusv1.ErrorReason_ERROR_REASON_INVALID_MEMBERS) {
		t.Fatalf("REST: %d %v", code, body)
	}
}

func TestBatchesAreListedAndReadWithTheirExecutionsAndMembers(t *testing.T) {
	t.Parallel()
	f := startRunbooks(t)
	f.apply(t, mailboxRunbook)
	start := time.Date(2025, 3, 15, 0, 0, 0, 0, time.UTC)
	exec := func(sql string, args ...any) int64 {
		t.Helper()
		var id int64
		if err := f.pool.QueryRow(f.ctx, sql+" RETURNING id", args...).Scan(&id); err != nil {
			t.Fatal(err)
		}
		return id
	}
	var ids []int64
	for i := range 3 {
		ids = append(ids, exec(`INSERT INTO batches (runbook_id, runbook_name, batch_start_time, status)
			SELECT id, name, $1, 'active' FROM runbooks WHERE name = 'mailbox-move'`, start.AddDate(0, 0, i)))
	}
	batch := ids[0]
	a := exec(`INSERT INTO batch_members (batch_id, member_key, status) VALUES ($1, 'a', 'active')`, batch)
	b := exec(`INSERT INTO batch_members (batch_id, member_key, status) VALUES ($1, 'b', 'active')`, batch)
	exec(`INSERT INTO batch_members (batch_id, member_key, status, removed_at) VALUES ($1, 'c', 'removed', now())`, batch)
	notify := exec(`INSERT INTO phase_executions (batch_id, phase_name, offset_minutes, due_at, runbook_version, status, dispatched_at)
		VALUES ($1, 'notify', -60, $2, 1, 'completed', $2)`, batch, start.Add(-time.Hour))
	exec(`INSERT INTO phase_executions (batch_id, phase_name, offset_minutes, due_at, runbook_version, status)
		VALUES ($1, 'migrate', 0, $2, 1, 'pending')`, batch, start)
	for _, m := range []struct {
		member int64
		status string
	}{{a, "succeeded"}, {b, "polling"}} {
		exec(`INSERT INTO step_executions (phase_execution_id, batch_member_id, step_name, step_index, worker_id, function_name,
			params_json, status) VALUES ($1, $2, 'send-notice', 0, 'mailer', 'send_email', '{}', $3)`, notify, m.member, m.status)
	}
	exec(`INSERT INTO init_executions (batch_id, step_name, step_index, runbook_version, worker_id, function_name, params_json,
		status, job_id, error_message) VALUES ($1, 'create-endpoint', 0, 1, 'exchange', 'create_migration_endpoint', '{}', 'failed',
		'job-1', 'endpoint exists')`, batch)

	// Newest first, in pages, over REST.
	var listed []string
	token := ""
	for page := 0; ; page++ {
		code, body := f.rest(t, "GET", "/v1/runbooks/mailbox-move/batches?page_size=2&page_token="+token, nil)
		if code != http.StatusOK {
			t.Fatalf("list: %d %v", code, body)
		}
		for _, x := range body["batches"].([]any) {
			bm := x.(map[string]any)
			listed = append(listed, bm["batch_id"].(string))
			if bm["status"] != "BATCH_STATUS_ACTIVE" || bm["runbook_version"] != 1.0 || bm["phase_executions"] != nil {
				t.Fatalf("listed batch %v", bm)
			}
		}
		if token, _ = body["next_page_token"].(string); token == "" {
			break
		}
		if page > 3 {
			t.Fatal("paging does not end")
		}
	}
	if want := []string{fmt.Sprint(ids[2]), fmt.Sprint(ids[1]), fmt.Sprint(ids[0])}; !reflect.DeepEqual(listed, want) {
		t.Fatalf("listed %v, want %v", listed, want)
	}

	resp, err := f.runbooks.GetBatch(f.ctx, &luciusv1.GetBatchRequest{BatchId: batch})
	if err != nil {
		t.Fatal(err)
	}
	got := resp.GetBatch()
	if got.GetRunbookName() != "mailbox-move" || got.GetRunbookVersion() != 1 || !got.GetBatchStartTime().AsTime().Equal(start) ||
		got.GetStatus() != luciusv1.BatchStatus_BATCH_STATUS_ACTIVE || got.GetDetectTime() == nil || got.GetInitDispatchTime() != nil ||
		got.GetActiveMemberCount() != 2 || got.GetRemovedMemberCount() != 1 || len(got.GetPhaseExecutions()) != 2 {
		t.Fatalf("batch %v", got)
	}
	p := got.GetPhaseExecutions()[0]
	wantCounts := &luciusv1.StepExecutionCounts{Total: 2, Succeeded: 1, Polling: 1}
	if p.GetPhaseExecutionId() != notify || p.GetPhaseName() != "notify" || p.GetOffsetMinutes() != -60 ||
		!p.GetDueTime().AsTime().Equal(start.Add(-time.Hour)) || p.GetStatus() != luciusv1.PhaseExecutionStatus_PHASE_EXECUTION_STATUS_COMPLETED ||
		p.GetDispatchTime() == nil || p.GetStepCounts().String() != wantCounts.String() {
		t.Fatalf("phase execution %v", p)
	}
	if q := got.GetPhaseExecutions()[1]; q.GetStatus() != luciusv1.PhaseExecutionStatus_PHASE_EXECUTION_STATUS_PENDING || q.GetStepCounts().GetTotal() != 0 {
		t.Fatalf("pending phase execution %v", q)
	}
	if in := got.GetInitExecutions(); len(in) != 1 || in[0].GetStepName() != "create-endpoint" || in[0].GetFunction() != "create_migration_endpoint" ||
		in[0].GetStatus() != luciusv1.StepExecutionStatus_STEP_EXECUTION_STATUS_FAILED || in[0].GetErrorMessage() != "endpoint exists" ||
		in[0].GetJobId() != "job-1" {
		t.Fatalf("init executions %v", in)
	}

	code, body := f.rest(t, "GET", fmt.Sprintf("/v1/batches/%d", batch), nil)
	if code != http.StatusOK || body["batch"].(map[string]any)["phase_executions"].([]any)[0].(map[string]any)["step_counts"].(map[string]any)["polling"] != 1.0 {
		t.Fatalf("get over REST: %d %v", code, body)
	}
	// Members by key, in pages, each with its step executions.
	var members []*luciusv1.BatchMember
	for token := ""; ; {
		resp, err := f.runbooks.ListBatchMembers(f.ctx, &luciusv1.ListBatchMembersRequest{BatchId: batch, PageSize: 2, PageToken: token})
		if err != nil {
			t.Fatal(err)
		}
		members = append(members, resp.GetMembers()...)
		if token = resp.GetNextPageToken(); token == "" {
			break
		}
		if len(members) > 3 {
			t.Fatal("member paging does not end")
		}
	}
	if len(members) != 3 || members[0].GetMemberKey() != "a" || members[1].GetMemberKey() != "b" || members[2].GetMemberKey() != "c" {
		t.Fatalf("members %v", members)
	}
	if st := members[0].GetSteps(); members[0].GetStatus() != luciusv1.BatchMemberStatus_BATCH_MEMBER_STATUS_ACTIVE ||
		members[0].GetAddTime() == nil || len(st) != 1 || st[0].GetPhaseName() != "notify" || st[0].GetKind() != "phase" ||
		st[0].GetStepName() != "send-notice" || st[0].GetFunction() != "send_email" ||
		st[0].GetStatus() != luciusv1.StepExecutionStatus_STEP_EXECUTION_STATUS_SUCCEEDED || st[0].GetDispatchTime() != nil {
		t.Fatalf("member a %v", members[0])
	}
	if st := members[1].GetSteps(); len(st) != 1 || st[0].GetStatus() != luciusv1.StepExecutionStatus_STEP_EXECUTION_STATUS_POLLING {
		t.Fatalf("member b %v", members[1])
	}
	if c := members[2]; c.GetStatus() != luciusv1.BatchMemberStatus_BATCH_MEMBER_STATUS_REMOVED || c.GetRemoveTime() == nil || len(c.GetSteps()) != 0 {
		t.Fatalf("member c %v", c)
	}

	for _, tt := range []struct {
		path   string
		code   int
		reason string
	}{
		{fmt.Sprintf("/v1/batches/%d", ids[2]+100), http.StatusNotFound, server.Reason(luciusv1.ErrorReason_ERROR_REASON_BATCH_NOT_FOUND)},
		{fmt.Sprintf("/v1/batches/%d/members", ids[2]+100), http.StatusNotFound, server.Reason(luciusv1.ErrorReason_ERROR_REASON_BATCH_NOT_FOUND)},
		{fmt.Sprintf("/v1/batches/%d/members?page_token=garbage", batch), http.StatusBadRequest, server.Reason(luciusv1.ErrorReason_ERROR_REASON_INVALID_PAGE_TOKEN)},
		{"/v1/runbooks/nope/batches", http.StatusNotFound, server.Reason(luciusv1.ErrorReason_ERROR_REASON_RUNBOOK_NOT_FOUND)},
		{"/v1/runbooks/mailbox-move/batches?page_token=garbage", http.StatusBadRequest, server.Reason(luciusv1.ErrorReason_ERROR_REASON_INVALID_PAGE_TOKEN)},
		{"/v1/batches/0", http.StatusBadRequest, server.Reason(luciusv1.ErrorReason_ERROR_REASON_INVALID_ARGUMENT)},
	} {
		if code, body := f.rest(t, "GET", tt.path, nil); code != tt.code || reasonOf(body) != tt.reason {
			t.Fatalf("GET %s: %d %v, want %d %s", tt.path, code, body, tt.code, tt.reason)
		}
	}
}
