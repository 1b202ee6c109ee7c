package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"google.golang.org/protobuf/types/known/timestamppb"

	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
)

// browser is one headless Debian chromium for a test; each tab() is a
// fresh profile (its own cookies), as a new user's browser would be.
type browser struct {
	t    *testing.T
	ctx  context.Context
	shot string // where screenshots go

	mu     sync.Mutex
	errors []string // script exceptions, console errors, CSP violations
}

func newBrowser(t *testing.T) *browser {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatal("chromium is not installed: run .ci/chromium (make test does)")
	}
	shots, err := filepath.Abs("../../.build/screenshots")
	if err == nil {
		err = os.MkdirAll(shots, 0o755)
	}
	if err != nil {
		t.Fatal(err)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true), chromedp.Flag("disable-component-update", true),
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1360, 900))
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(alloc)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	if err := chromedp.Do(ctx); err != nil { // start the browser
		t.Fatal(err)
	}
	return &browser{t: t, ctx: ctx, shot: shots}
}

// tab opens a tab in a fresh browser context: no cookies yet.
func (b *browser) tab() context.Context {
	ctx, cancel := chromedp.NewContext(b.ctx, chromedp.WithNewBrowserContext(), chromedp.WithListener(func(ev any) {
		var msg string
		switch e := ev.(type) {
		case *runtime.EventExceptionThrown:
			msg = "exception: " + e.ExceptionDetails.Text
			if e.ExceptionDetails.Exception != nil {
				msg += " " + e.ExceptionDetails.Exception.Description
			}
		case *runtime.EventConsoleAPICalled:
			if e.Type == runtime.ConsoleAPICalledTypeError {
				msg = "console.error"
			}
		case *log.EventEntryAdded:
			if e.Entry.Level == log.EntryLevelError && e.Entry.Source != log.EntrySourceNetwork {
				msg = fmt.Sprintf("%s: %s", e.Entry.Source, e.Entry.Text)
			}
		}
		if msg != "" {
			b.mu.Lock()
			b.errors = append(b.errors, msg)
			b.mu.Unlock()
		}
	}))
	b.t.Cleanup(cancel)
	if _, err := chromedp.Call(ctx, log.Enable, cdp.Empty{}); err != nil {
		b.t.Fatal(err)
	}
	return ctx
}

// do runs actions on a tab within 30 s.
func (b *browser) do(tab context.Context, what string, actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(tab, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		body, _ := chromedp.Run(tab, chromedp.Evaluate[string]("location.href + '\\n' + (document.body ? document.body.innerText.slice(0, 2000) : '')"))
		b.t.Fatalf("%s: %v\npage text:\n%s", what, err, body)
	}
}

// wait waits (30 s at most) until a JavaScript expression is truthy. It
// evaluates again and again rather than with one Poll, so a navigation
// under way (a click on a link) only delays it.
func (b *browser) wait(tab context.Context, what, expr string) {
	b.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ok, err := chromedp.Run(tab, chromedp.Evaluate[bool]("Boolean("+expr+")"))
		if err == nil && ok {
			return
		}
		if time.Now().After(deadline) {
			body, _ := chromedp.Run(tab, chromedp.Evaluate[string]("location.href + '\\n' + (document.body ? document.body.innerText.slice(0, 2000) : '')"))
			b.t.Fatalf("%s: not seen in 30s (%v)\npage text:\n%s", what, err, body)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (b *browser) eval(tab context.Context, expr string) string {
	b.t.Helper()
	v, err := chromedp.Run(tab, chromedp.Evaluate[string](expr))
	if err != nil {
		b.t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// screenshot saves the whole page as .build/screenshots/<name>.png.
func (b *browser) screenshot(tab context.Context, name string) {
	b.t.Helper()
	png, err := chromedp.Run(tab, chromedp.FullScreenshot(100))
	if err == nil {
		err = os.WriteFile(filepath.Join(b.shot, name+".png"), png, 0o644)
	}
	if err != nil {
		b.t.Fatalf("screenshot %s: %v", name, err)
	}
}

// uiURL runs `lucius ui` as token's holder and returns the login URL it prints.
func (s *suite) uiURL(token string, args ...string) string {
	s.t.Helper()
	stdout, stderr, code := s.cli(token, append([]string{"ui"}, args...)...)
	u := strings.TrimSpace(stdout)
	if code != 0 || !strings.HasPrefix(u, "http://"+s.Endpoints.GatewayHTTP+"/ui/login?ticket=lct_") ||
		!strings.Contains(stderr, "valid until") {
		s.t.Fatalf("lucius ui %v exited %d:\n%s\n%s", args, code, stdout, stderr)
	}
	return u
}

// submitWith submits a command over REST with token and returns its job id.
func (s *suite) submitWith(token, tenant, workflow string, payload map[string]any) string {
	s.t.Helper()
	out, _ := s.output(fmt.Sprintf("console-%d.json", time.Now().UnixNano()))
	body := map[string]any{"tenant_id": tenant, "request_type": workflow, "schema_version": "1", "input_ref": s.input("console.txt", sampleText),
		"output_ref": out, "payload": payload}
	code, _, resp := s.restAs(token, "POST", "/v1/commands", body)
	if code != http.StatusAccepted {
		s.t.Fatalf("submit %s: %d %v", workflow, code, resp)
	}
	return resp["job_id"].(string)
}

// nodeIs is the expression "the DAG node drawn for node has status".
func nodeIs(node, status string) string {
	return fmt.Sprintf(`document.querySelector('svg.dag g.node[data-node=%q][data-status=%q]') !== null`, node, status)
}

// The web console in Debian's chromium: lucius ui's one-time login, a job's
// page (its DAG, steps and statuses, updated live), the jobs list updated
// live, cancel from a job's page, replay of a dead letter, and the other
// pages; a screenshot of each goes to .build/screenshots/.
func TestConsoleInHeadlessChromium(t *testing.T) {
	t.Parallel()
	s := startSuite(t, suiteOptions{env: map[string]string{"LUCIUS_SWEEP_ACK_INTERVAL": "200ms"}})
	acme := s.partner("acme")
	threeSteps := s.submitWith(acme, "acme", "OCR_EMBEDDING_SIS", map[string]any{"prompt_set": []any{"when are invoices due?"}})
	globex := s.submitWith(s.operator, "globex", "E2E_MANUAL", map[string]any{})
	flaky := s.submitWith(s.operator, "acme", "E2E_FLAKY", map[string]any{})
	raster := s.submitWith(s.operator, "acme", "raster_processing", map[string]any{"container_name": "bronze", "blob_name": "small.tif"})
	mosaic := s.submitWith(s.operator, "acme", "tile_mosaic", map[string]any{"tiles": 24})
	if job := s.waitJob(threeSteps, 60*time.Second); job.GetStatus() != luciusv1.JobStatus_JOB_STATUS_SUCCEEDED {
		t.Fatalf("the three-step job ended %s: %s", job.GetStatus(), job.GetReason())
	}
	b := newBrowser(t)

	// The acceptance: the URL of `lucius ui --job ID` renders that job's
	// page, with its id, its three steps and their statuses.
	login := s.uiURL(acme, "--job", threeSteps)
	partner := b.tab()
	b.do(partner, "open the login URL", chromedp.Navigate(login))
	b.wait(partner, "the job's page", fmt.Sprintf(`document.querySelector('#job-id')?.textContent === %q`, threeSteps))
	for _, step := range []string{"ocr", "embedding", "sis"} {
		b.wait(partner, step+" drawn SUCCEEDED", nodeIs(step, "SUCCEEDED"))
		b.wait(partner, step+" in the attempts", fmt.Sprintf(`document.querySelector('#timeline tr.step[data-step=%q][data-status="SUCCEEDED"]') !== null`, step))
	}
	b.wait(partner, "the job's status", `document.querySelector('#job-status [data-status="SUCCEEDED"]') !== null`)
	b.wait(partner, "its events", `document.querySelectorAll('#events tr[data-type="JOB_STATUS_CHANGED"]').length > 0`)
	if p := b.eval(partner, "location.pathname"); p != "/ui/jobs/"+threeSteps {
		t.Fatalf("landed on %s", p)
	}
	b.screenshot(partner, "job")
	if v := b.eval(partner, `String(document.querySelector('#nav a[data-page="runbooks"]') === null)`); v != "true" {
		t.Fatal("a partner's console links to the operators' runbooks")
	}
	// The ticket worked once: a second browser gets the sign-in page.
	again := b.tab()
	b.do(again, "open the used login URL", chromedp.Navigate(login))
	b.wait(again, "the refusal", `document.querySelector('#problem')?.textContent.includes('used already or has expired')`)
	b.do(again, "open the console without a session", chromedp.Navigate("http://"+s.Endpoints.GatewayHTTP+"/ui/jobs"))
	b.wait(again, "the sign-in page", `location.pathname === '/ui/login'`)
	// Another tenant's job is not found for acme's partner.
	b.do(partner, "open globex's job", chromedp.Navigate("http://"+s.Endpoints.GatewayHTTP+"/ui/jobs/"+globex))
	b.wait(partner, "not found", `document.querySelector('.problem')?.textContent.includes('not found')`)

	// An operator's console: the jobs list shows a new job as it is accepted.
	op := b.tab()
	b.do(op, "open the operator's login URL", chromedp.Navigate(s.uiURL(s.operator)))
	b.wait(op, "the jobs page", fmt.Sprintf(`location.pathname === '/ui/jobs' && document.querySelector('#jobs tr[data-job=%q]') !== null`, threeSteps))
	b.wait(op, "the list to go live", `document.querySelector('#live.on') !== null`)
	time.Sleep(300 * time.Millisecond) // the watch starts from now: let it open before the submit
	manual := s.submitWith(s.operator, "acme", "E2E_MANUAL", map[string]any{})
	b.wait(op, "the new job listed live", fmt.Sprintf(`document.querySelector('#jobs tr[data-job=%q]') !== null`, manual))
	b.screenshot(op, "jobs")

	// A job's page follows it live: the test plays the worker.
	b.do(op, "open the manual job", chromedp.Navigate("http://"+s.Endpoints.GatewayHTTP+"/ui/jobs/"+manual))
	b.wait(op, "the step awaiting its ACK", nodeIs("manual", "AWAITING_ACK"))
	b.eval(op, "window.sameDocument = 'yes'")
	step := s.waitStepAttempt(manual, luciusv1.StepStatus_STEP_STATUS_AWAITING_ACK, 1)
	lease, token := step.GetAttempts()[0].GetLeaseId(), s.callbackToken(manual, "manual", 1)
	cb := s.callbacks(0, "manual")
	if r, err := cb.Ack(s.ctx, &luciusv1.AckRequest{JobId: manual, StepId: "manual", AttemptNo: 1, LeaseId: lease, AckTime: timestamppb.Now(),
		WorkerId: "e2e-console", CallbackToken: token}); err != nil || r.GetOutcome() != luciusv1.CallbackOutcome_CALLBACK_OUTCOME_APPLIED {
		t.Fatalf("ack: %v %v", r, err)
	}
	b.wait(op, "the step drawn IN_PROGRESS", nodeIs("manual", "IN_PROGRESS"))
	b.wait(op, "the ACK in the attempts", `document.querySelector('#timeline tr.attempt')?.textContent.includes('e2e-console')`)
	if r, err := cb.Result(s.ctx, &luciusv1.ResultRequest{JobId: manual, StepId: "manual", AttemptNo: 1, LeaseId: lease,
		Status: luciusv1.ResultStatus_RESULT_STATUS_SUCCEEDED, FinishTime: timestamppb.Now(), CallbackToken: token}); err != nil ||
		r.GetOutcome() != luciusv1.CallbackOutcome_CALLBACK_OUTCOME_APPLIED {
		t.Fatalf("result: %v %v", r, err)
	}
	b.wait(op, "the step drawn SUCCEEDED", nodeIs("manual", "SUCCEEDED"))
	b.wait(op, "the job SUCCEEDED", `document.querySelector('#job-status [data-status="SUCCEEDED"]') !== null`)
	b.wait(op, "the end in the event log", `document.querySelector('#events tr[data-type="JOB_STATUS_CHANGED"]:last-child')?.textContent.includes('SUCCEEDED')`)
	if v := b.eval(op, "String(window.sameDocument)"); v != "yes" {
		t.Fatal("the page reloaded instead of updating live")
	}

	// A conditional's branch, and a fan-out's children collapsed with counts.
	for _, id := range []string{raster, mosaic} {
		if job := s.waitJob(id, 60*time.Second); job.GetStatus() != luciusv1.JobStatus_JOB_STATUS_SUCCEEDED {
			t.Fatalf("job %s ended %s: %s", id, job.GetStatus(), job.GetReason())
		}
	}
	b.do(op, "open the conditional job", chromedp.Navigate("http://"+s.Endpoints.GatewayHTTP+"/ui/jobs/"+raster))
	b.wait(op, "the branch taken", nodeIs("process_fa", "SUCCEEDED")+" && "+nodeIs("process_docker", "SKIPPED")+
		` && document.querySelector('svg.dag path.edge.taken[data-from="route_by_size"][data-to="process_fa"]') !== null`+
		` && document.querySelector('svg.dag path.edge.not-taken[data-from="route_by_size"][data-to="process_docker"]') !== null`)
	b.screenshot(op, "job-conditional")
	b.do(op, "open the fan-out job", chromedp.Navigate("http://"+s.Endpoints.GatewayHTTP+"/ui/jobs/"+mosaic))
	b.wait(op, "the children counted", nodeIs("split", "SUCCEEDED")+
		` && document.querySelector('svg.dag g.node[data-node="split"] text.detail')?.textContent.startsWith('×24: ✓24')`+
		` && document.querySelectorAll('svg.dag g.node').length < 10`+
		` && document.querySelector('#timeline tr.fold[data-fold="split"]')?.textContent.includes('24 children')`+
		` && document.querySelector('#timeline tr.step[data-step="split[3]"]')?.hidden === true`)
	b.screenshot(op, "job-fanout")
	b.do(op, "unfold the children", chromedp.Click(chromedp.CSS(`#timeline button[data-fold="split"]`)))
	b.wait(op, "the children shown", `document.querySelector('#timeline tr.step[data-step="split[3]"]')?.hidden === false`)

	// Cancel from a job's page.
	doomed := s.submitWith(s.operator, "acme", "E2E_MANUAL", map[string]any{})
	b.do(op, "open the job to cancel", chromedp.Navigate("http://"+s.Endpoints.GatewayHTTP+"/ui/jobs/"+doomed))
	b.wait(op, "its step awaiting the ACK", nodeIs("manual", "AWAITING_ACK"))
	b.do(op, "cancel it", chromedp.Click(chromedp.CSS("#cancel")), chromedp.Click(chromedp.CSS("#cancel-confirm")))
	b.wait(op, "the cancel shown", `document.querySelector('#job-status [data-status="CANCELLING"], #job-status [data-status="CANCELLED"]') !== null`)
	b.wait(op, "the cancel in the event log", `document.querySelector('#events tr[data-type="CANCEL_REQUESTED"]') !== null`)
	if got, err := s.jobs.GetJob(s.ctx, &luciusv1.GetJobRequest{JobId: doomed}); err != nil ||
		(got.GetJob().GetStatus() != luciusv1.JobStatus_JOB_STATUS_CANCELLING && got.GetJob().GetStatus() != luciusv1.JobStatus_JOB_STATUS_CANCELLED) {
		t.Fatalf("after the console's cancel the job is %v (%v)", got.GetJob().GetStatus(), err)
	}
	if n := s.count(`SELECT count(*) FROM job_events WHERE job_id = $1 AND type = 'CANCEL_REQUESTED' AND data->>'principal' LIKE '%#stack-operator'`, doomed); n != 1 {
		t.Fatalf("%d CANCEL_REQUESTED events by the operator", n)
	}
	b.screenshot(op, "job-cancelled")

	// Replay a dead letter.
	if job := s.waitJob(flaky, 30*time.Second); job.GetStatus() != luciusv1.JobStatus_JOB_STATUS_FAILED_FINAL {
		t.Fatalf("the flaky job ended %s", job.GetStatus())
	}
	code, list := s.rest("GET", "/v1/deadletters?job_id="+flaky, nil)
	letters, _ := list["dead_letters"].([]any)
	if code != http.StatusOK || len(letters) != 1 {
		t.Fatalf("dead letters of the flaky job: %d %v", code, list)
	}
	letter := letters[0].(map[string]any)["dead_letter_id"].(string)
	b.do(op, "open the dead letters", chromedp.Navigate("http://"+s.Endpoints.GatewayHTTP+"/ui/deadletters"))
	b.wait(op, "the dead letter listed", fmt.Sprintf(`document.querySelector('#dead-letters tr[data-dead-letter=%q]') !== null`, letter))
	b.screenshot(op, "deadletters")
	b.do(op, "open the dead letter", chromedp.Click(chromedp.CSS(fmt.Sprintf(`#dead-letters tr[data-dead-letter=%q] a`, letter))))
	b.wait(op, "its reason", `document.querySelector('#dl-reason')?.textContent === 'MAX_ATTEMPTS_EXHAUSTED'`)
	b.wait(op, "replay enabled", `document.querySelector('#replay') && !document.querySelector('#replay').disabled`)
	b.screenshot(op, "deadletter")
	b.do(op, "replay it", chromedp.Click(chromedp.CSS("#replay")))
	b.wait(op, "the replay's page", fmt.Sprintf(`/^\/ui\/jobs\/[0-9a-f]{64}$/.test(location.pathname) && location.pathname !== '/ui/jobs/%s' && document.querySelector('#job-id') !== null`, flaky))
	replay := strings.TrimPrefix(b.eval(op, "location.pathname"), "/ui/jobs/")
	if got, err := s.jobs.GetJob(s.ctx, &luciusv1.GetJobRequest{JobId: replay}); err != nil || got.GetJob().GetReplayOf() != flaky {
		t.Fatalf("the console's replay %s: %v (%v)", replay, got.GetJob(), err)
	}

	// Workflows, with the DAG of a version.
	b.do(op, "open the workflows", chromedp.Navigate("http://"+s.Endpoints.GatewayHTTP+"/ui/workflows"))
	b.wait(op, "the workflows listed", `document.querySelector('#workflows tr[data-workflow="OCR_EMBEDDING_SIS"]') !== null`)
	b.screenshot(op, "workflows")
	b.do(op, "open a workflow", chromedp.Click(chromedp.CSS(`#workflows tr[data-workflow="OCR_EMBEDDING_SIS"] a`)))
	b.wait(op, "its DAG", `['START', 'ocr', 'embedding', 'sis', 'END'].every((n) => document.querySelector('svg.dag g.node[data-node="' + n + '"]'))`)
	b.screenshot(op, "workflow")

	// Runbooks and a batch with its members.
	runbooks := luciusv1.NewRunbookServiceClient(s.conn)
	if _, err := runbooks.ApplyRunbook(s.ctx, &luciusv1.ApplyRunbookRequest{Source: e2eRunbook}); err != nil {
		t.Fatal(err)
	}
	start := timestamppb.New(time.Now().Add(48 * time.Hour).Truncate(time.Hour))
	var members []*luciusv1.RunbookMember
	for i := range 3 {
		members = append(members, &luciusv1.RunbookMember{MemberKey: fmt.Sprintf("m%02d", i), BatchTime: start, Values: map[string]string{
			"email": fmt.Sprintf("m%02d@contoso.test", i), "notice_outcome": "succeed", "move_outcome": "succeed"}})
	}
	if _, err := runbooks.LoadMembers(s.ctx, &luciusv1.LoadMembersRequest{Name: "e2e-migration", Members: members, Replace: true}); err != nil {
		t.Fatal(err)
	}
	b.do(op, "open the runbooks", chromedp.Navigate("http://"+s.Endpoints.GatewayHTTP+"/ui/runbooks"))
	b.wait(op, "the runbook listed", `document.querySelector('#runbooks tr[data-runbook="e2e-migration"]') !== null`)
	b.screenshot(op, "runbooks")
	deadline := time.Now().Add(30 * time.Second)
	for s.count(`SELECT count(*) FROM batches`) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the scheduler found no batch")
		}
		time.Sleep(100 * time.Millisecond)
	}
	b.do(op, "open the runbook", chromedp.Navigate("http://"+s.Endpoints.GatewayHTTP+"/ui/runbooks/e2e-migration"))
	b.wait(op, "its batch", `document.querySelector('#batches tr[data-batch] a') !== null`)
	b.do(op, "open the batch", chromedp.Click(chromedp.CSS(`#batches tr[data-batch] a`)))
	b.wait(op, "its phases and members", `document.querySelector('#phases tr[data-phase="notify"]') && ['m00', 'm01', 'm02'].every((m) => document.querySelector('#members tr[data-member="' + m + '"]'))`)
	b.screenshot(op, "batch")

	// Tenants: usage, and pause and resume.
	b.do(op, "open the tenant", chromedp.Navigate("http://"+s.Endpoints.GatewayHTTP+"/ui/tenants/acme"))
	b.wait(op, "its usage", `/^\d+\+?$/.test(document.querySelector('#active-jobs')?.textContent || '')`)
	b.do(op, "pause it", chromedp.SendKeys(chromedp.CSS("#pause-reason"), "console test"), chromedp.Click(chromedp.CSS("#pause")))
	b.wait(op, "paused", `document.querySelector('#pause-state')?.textContent.startsWith('Paused') && document.querySelector('#resume') !== null`)
	if n := s.count(`SELECT count(*) FROM config_pauses WHERE scope = 'tenant' AND key = 'acme'`); n != 1 {
		t.Fatalf("%d pauses of acme after the console's pause", n)
	}
	b.do(op, "open the tenants", chromedp.Navigate("http://"+s.Endpoints.GatewayHTTP+"/ui/tenants"))
	b.wait(op, "acme listed as paused", `document.querySelector('#tenants tr[data-tenant="acme"]')?.textContent.includes('console test')`)
	b.screenshot(op, "tenants")
	b.do(op, "open the tenant again", chromedp.Navigate("http://"+s.Endpoints.GatewayHTTP+"/ui/tenants/acme"))
	b.wait(op, "the resume button", `document.querySelector('#resume') !== null`)
	b.screenshot(op, "tenant")
	b.do(op, "resume it", chromedp.Click(chromedp.CSS("#resume")))
	b.wait(op, "running again", `document.querySelector('#pause-state')?.textContent === 'Running.'`)

	b.mu.Lock()
	defer b.mu.Unlock()
	var unexpected []string
	for _, e := range b.errors {
		if !regexp.MustCompile(`status of 40[34]`).MatchString(e) {
			unexpected = append(unexpected, e)
		}
	}
	if len(unexpected) > 0 {
		t.Fatalf("the pages logged errors:\n%s", strings.Join(unexpected, "\n"))
	}
}
