package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/lucius-platform/lucius/base/process"
	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
)

// e2eRunbook drives every path of seed 003 with the demo worker pool, whose
// steps behave as their params say (outcome: succeed | fail | poll:N | poll).
const e2eRunbook = `name: e2e-migration
version: 1
description: Compressed-time end-to-end runbook.
data_source: {columns: [email, notice_outcome, move_outcome]}
init:
  - {name: prepare, worker_id: demo, function: prepare_batch, params: {batch: "{{ _batch_id }}", starts: "{{ _batch_start_time }}"}}
  - name: warm-up
    worker_id: demo
    function: warm_up
    params: {outcome: "poll:1"}
    is_poll_step: true
    poll_interval_sec: 30
    poll_timeout_sec: 3600
phases:
  - name: notify
    offset_minutes: 2
    steps:
      - {name: send-notice, worker_id: demo, function: send_email, params: {to: "{{ email }}", outcome: "{{ notice_outcome }}"}, on_failure: apologize}
  - name: migrate
    offset_minutes: -1
    steps:
      - name: start-move
        worker_id: demo
        function: start_move
        params: {mailbox: "{{ email }}", outcome: "{{ move_outcome }}"}
        is_poll_step: true
        poll_interval_sec: 10
        poll_timeout_sec: 150
        on_failure: undo-move
      - {name: verify, worker_id: demo, function: verify_move, params: {mailbox: "{{ email }}"}}
  - name: cleanup
    offset_minutes: -8
    steps:
      - {name: close-out, worker_id: demo, function: close_out, params: {mailbox: "{{ email }}"}}
rollbacks:
  apologize:
    - {name: apologize-mail, worker_id: demo, function: send_email, params: {to: "{{ email }}", subject: sorry}}
  undo-move:
    - {name: cancel-move, worker_id: demo, function: cancel_move, params: {mailbox: "{{ email }}"}}
on_member_removed:
  - {name: farewell, worker_id: demo, function: send_email, params: {to: "{{ email }}", subject: removed}}
`

// seedEvents holds the seed's example of each event (the scheduler's golden
// files): each event on the bus must have exactly its keys, with values of
// the same JSON types.
const seedEvents = "../../services/scheduler/internal/scheduler/testdata/seed"

// shape is a JSON object's keys with the JSON type of each value.
func shape(t *testing.T, body []byte) map[string]string {
	t.Helper()
	var obj map[string]any
	if err := json.Unmarshal(body, &obj); err != nil {
		t.Fatalf("event %s: %v", body, err)
	}
	out := map[string]string{}
	for k, v := range obj {
		out[k] = fmt.Sprintf("%T", v)
	}
	return out
}

// The scheduler and the executor on compressed time (30x: a minute in two
// seconds): init steps (one polled), three phases at different offsets over
// 50 members, a poll step finishing after a few polls and one timing out into
// its rollback, a failing step with a rollback, a member added after the first
// phase (catch-up) and one removed mid-phase (its pending steps cancelled, its
// removal step run).
func TestRunbookRunsABatchOnCompressedTime(t *testing.T) {
	t.Parallel()
	const speedup = 30
	epoch := time.Now().UTC()
	clock := process.CompressedClock(epoch, speedup)
	s := startSuite(t, suiteOptions{env: map[string]string{
		"LUCIUS_CLOCK_SPEEDUP":      fmt.Sprint(speedup),
		"LUCIUS_CLOCK_EPOCH":        epoch.Format(time.RFC3339Nano),
		"LUCIUS_SCHEDULER_TICK":     "100ms",
		"LUCIUS_LOG_LEVEL":          "info",
		"LUCIUS_WORKER_CONCURRENCY": "16",
	}})
	started := time.Now()
	runbooks := luciusv1.NewRunbookServiceClient(s.conn)
	if _, err := runbooks.ApplyRunbook(s.ctx, &luciusv1.ApplyRunbookRequest{Source: e2eRunbook}); err != nil {
		t.Fatal(err)
	}
	start := clock().Add(3 * time.Minute).Truncate(time.Second) // the batch starts in six real seconds
	member := func(i int) *luciusv1.RunbookMember {
		notice, move := "succeed", "succeed"
		switch i {
		case 1:
			move = "poll:3" // finishes after three polls (1 s of real time; its timeout is 5 s)
		case 2:
			move = "poll" // never finishes: poll timeout, then its rollback
		case 3:
			notice = "fail" // fails: its rollback runs
		case 4:
			move = "poll" // still polling when it leaves the batch
		}
		return &luciusv1.RunbookMember{MemberKey: fmt.Sprintf("m%02d", i), BatchTime: timestamppb.New(start),
			Values: map[string]string{"email": fmt.Sprintf("m%02d@contoso.test", i), "notice_outcome": notice, "move_outcome": move}}
	}
	var members []*luciusv1.RunbookMember
	for i := range 50 {
		members = append(members, member(i))
	}
	load := func(ms []*luciusv1.RunbookMember, replace bool) {
		t.Helper()
		if _, err := runbooks.LoadMembers(s.ctx, &luciusv1.LoadMembersRequest{Name: "e2e-migration", Members: ms, Replace: replace}); err != nil {
			t.Fatal(err)
		}
	}
	load(members, true)

	wait := func(what string, query string, args ...any) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for s.count(query, args...) == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	wait("the batch to become active", `SELECT count(*) FROM batches WHERE status = 'active'`)
	wait("the first phase to be dispatched", `SELECT count(*) FROM phase_executions WHERE phase_name = 'notify' AND status <> 'pending'`)
	// Offsets count minutes before the start (seed 003): notify (2) was due,
	// and went out, before the batch started; migrate (-1) is due after it.
	if n := s.count(`SELECT count(*) FROM phase_executions p JOIN batches b ON b.id = p.batch_id
		WHERE p.phase_name = 'notify' AND p.due_at = b.batch_start_time - interval '2 minutes' AND p.dispatched_at < b.batch_start_time`); n != 1 {
		t.Fatal("notify was not due and dispatched two minutes before the batch start")
	}
	if n := s.count(`SELECT count(*) FROM phase_executions p JOIN batches b ON b.id = p.batch_id
		WHERE p.phase_name = 'migrate' AND p.due_at = b.batch_start_time + interval '1 minute'`); n != 1 {
		t.Fatal("migrate is not due a minute after the batch start")
	}

	// A member joins after the first phase: it catches up on notify only.
	latecomer := member(50)
	load([]*luciusv1.RunbookMember{latecomer}, false)
	wait("the latecomer's catch-up", `SELECT count(*) FROM step_executions s JOIN batch_members m ON m.id = s.batch_member_id
		WHERE m.member_key = 'm50' AND s.step_name = 'send-notice'`)
	if n := s.count(`SELECT count(*) FROM phase_executions WHERE phase_name = 'migrate' AND status = 'pending'`); n != 1 {
		t.Fatal("the test was too slow: migrate was already due when the latecomer arrived")
	}

	// Another leaves while its move is polling: what it still had is cancelled, its farewell runs.
	wait("m04's move to poll", `SELECT count(*) FROM step_executions s JOIN batch_members m ON m.id = s.batch_member_id
		WHERE m.member_key = 'm04' AND s.step_name = 'start-move' AND s.status = 'polling'`)
	var remaining []*luciusv1.RunbookMember
	for i := range 51 {
		if i != 4 {
			remaining = append(remaining, member(i))
		}
	}
	load(remaining, true)

	deadline := time.Now().Add(120 * time.Second)
	var status string
	for {
		if err := s.pool.QueryRow(s.ctx, `SELECT status FROM batches`).Scan(&status); err != nil {
			t.Fatal(err)
		}
		if status == "completed" || status == "failed" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("batch still %s", status)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("batch %s %s after the runbook was applied", status, time.Since(started).Round(time.Millisecond))
	// Work still settling (the farewell, rollbacks) ends shortly after.
	wait("every step execution to end", `SELECT CASE WHEN count(*) FILTER (WHERE status IN ('pending', 'dispatched', 'polling')) = 0
		THEN 1 ELSE 0 END FROM step_executions`)

	// The final rows, against the seed's status definitions.
	if status != "failed" {
		t.Fatalf("batch %s, want failed: m03's notice failed and m02's move timed out, so two phases failed", status)
	}
	var initStatuses []string
	var warmUpPolls int
	rows, err := s.pool.Query(s.ctx, `SELECT status, poll_count FROM init_executions ORDER BY step_index`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var st string
		var polls int
		rows.Scan(&st, &polls) //nolint:errcheck
		initStatuses, warmUpPolls = append(initStatuses, st), polls
	}
	rows.Close()
	if !reflect.DeepEqual(initStatuses, []string{"succeeded", "succeeded"}) || warmUpPolls < 1 {
		t.Fatalf("init executions %v, warm-up polled %d times", initStatuses, warmUpPolls)
	}
	phases := map[string]string{}
	rows, err = s.pool.Query(s.ctx, `SELECT phase_name, status FROM phase_executions`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var name, st string
		rows.Scan(&name, &st) //nolint:errcheck
		phases[name] = st
	}
	rows.Close()
	if want := map[string]string{"notify": "failed", "migrate": "failed", "cleanup": "completed"}; !reflect.DeepEqual(phases, want) {
		t.Fatalf("phases %v, want %v", phases, want)
	}
	counts := map[string]int{}
	rows, err = s.pool.Query(s.ctx, `SELECT s.kind || '/' || s.step_name || '/' || s.status, count(*) FROM step_executions s GROUP BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var k string
		var n int
		rows.Scan(&k, &n) //nolint:errcheck
		counts[k] = n
	}
	rows.Close()
	want := map[string]int{
		// 51 members got the notice (m50 by catch-up); m03's failed and was rolled back.
		"phase/send-notice/succeeded": 50, "phase/send-notice/rolled_back": 1, "rollback/apologize-mail/succeeded": 1,
		// 51 moves: m01 after its polls, m02 timed out and was rolled back, m04 left while polling.
		"phase/start-move/succeeded": 49, "phase/start-move/rolled_back": 1, "phase/start-move/cancelled": 1,
		"rollback/cancel-move/succeeded": 1,
		"phase/verify/succeeded":         49, "phase/verify/cancelled": 2,
		// cleanup was due after m04 left: the other 50.
		"phase/close-out/succeeded":  50,
		"removal/farewell/succeeded": 1,
	}
	if !reflect.DeepEqual(counts, want) {
		t.Fatalf("step executions\n got %v\nwant %v", counts, want)
	}
	var m01Polls, m02Polls int
	if err := s.pool.QueryRow(s.ctx, `SELECT
		(SELECT s.poll_count FROM step_executions s JOIN batch_members m ON m.id = s.batch_member_id WHERE m.member_key = 'm01' AND s.step_name = 'start-move'),
		(SELECT s.poll_count FROM step_executions s JOIN batch_members m ON m.id = s.batch_member_id WHERE m.member_key = 'm02' AND s.step_name = 'start-move')`).
		Scan(&m01Polls, &m02Polls); err != nil {
		t.Fatal(err)
	}
	if m01Polls < 3 || m02Polls < 1 {
		t.Fatalf("m01 polled %d times (want >= 3), m02 %d", m01Polls, m02Polls)
	}
	if n := s.count(`SELECT count(*) FROM step_executions s JOIN batch_members m ON m.id = s.batch_member_id
		WHERE m.member_key = 'm50' AND s.kind = 'phase' AND s.step_name = 'send-notice'`); n != 1 {
		t.Fatalf("the latecomer got %d notices, want exactly 1", n)
	}
	if n := s.count(`SELECT count(*) FROM batch_members WHERE member_key = 'm04' AND status = 'removed' AND removed_at IS NOT NULL`); n != 1 {
		t.Fatal("m04 is not marked removed")
	}
	// Every dispatch ran as a Lucius job that ended as its execution did.
	if n := s.count(`SELECT count(*) FROM step_executions s JOIN jobs j ON j.job_id = s.job_id
		WHERE (s.status = 'succeeded') <> (j.status = 'SUCCEEDED')`); n != 0 {
		t.Fatalf("%d step executions disagree with their jobs", n)
	}

	// The events on the bus have the seed's shapes, and none was sent twice.
	rows, err = s.pool.Query(s.ctx, `SELECT properties->>'MessageType', body FROM outbox WHERE kind = 'runbook-event' ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for rows.Next() {
		var typ string
		var body []byte
		rows.Scan(&typ, &body) //nolint:errcheck
		seen[typ]++
		example, err := os.ReadFile(filepath.Join(seedEvents, typ+".json"))
		if err != nil {
			t.Fatalf("%s event: no seed example: %v", typ, err)
		}
		wantShape := shape(t, example)
		got := shape(t, body)
		if typ == "poll-check" {
			if _, init := got["initExecutionId"]; init { // the extension for init steps
				wantShape["initExecutionId"] = wantShape["stepExecutionId"]
				delete(wantShape, "stepExecutionId")
			}
		}
		if !reflect.DeepEqual(got, wantShape) {
			t.Fatalf("%s event %s\nshape %v\nwant  %v", typ, body, got, wantShape)
		}
	}
	rows.Close()
	var types []string
	for typ := range seen {
		types = append(types, typ)
	}
	sort.Strings(types)
	if strings.Join(types, ",") != "batch-init,member-added,member-removed,phase-due,poll-check" || seen["batch-init"] != 1 ||
		seen["phase-due"] != 3 || seen["member-added"] != 1 || seen["member-removed"] != 1 {
		t.Fatalf("events %v", seen)
	}
	if n := s.count(`SELECT count(*) - count(DISTINCT message_id) FROM outbox WHERE kind = 'runbook-event'`); n != 0 {
		t.Fatalf("%d events sent twice", n)
	}
	t.Logf("events: %v; %d step executions; whole test %s", seen, s.count(`SELECT count(*) FROM step_executions`),
		time.Since(started).Round(time.Millisecond))
}
