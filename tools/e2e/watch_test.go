package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/lucius-platform/lucius/base/auth"
	"github.com/lucius-platform/lucius/base/server"
	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
)

// WatchJob streams a job from the moment it is watched to its end: the job
// first, then every event as it commits, the job again with each status
// change, and the stream ends on the terminal one. Resuming from an event id
// repeats nothing and misses nothing; REST streams the same, one JSON object
// a line; another tenant's job is NOT_FOUND.
func TestWatchJobStreamsEventsUntilTheJobEnds(t *testing.T) {
	t.Parallel()
	s := startSuite(t, suiteOptions{})
	out, _ := s.output("watch.json")
	payload, _ := structpb.NewStruct(map[string]any{"prompt_set": []any{"what is due?"}})
	resp, err := s.cmds.Submit(s.ctx, &luciusv1.SubmitRequest{Command: &luciusv1.Command{TenantId: "acme",
		RequestType: "OCR_EMBEDDING_SIS", SchemaVersion: "1", InputRef: s.input("watch.txt", sampleText), OutputRef: out, Payload: payload}})
	if err != nil {
		t.Fatal(err)
	}
	id := resp.GetJobId()
	stream, err := s.jobs.WatchJob(s.ctx, &luciusv1.WatchJobRequest{JobId: id, AfterEventId: 1})
	if err != nil {
		t.Fatal(err)
	}
	var events []*luciusv1.JobEvent
	var last *luciusv1.Job
	first := true
	for {
		r, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if first && (r.GetJob() == nil || r.GetEvent() != nil) {
			t.Fatalf("the first message is not the job alone: %v", r)
		}
		first = false
		if r.GetJob() != nil {
			last = r.GetJob()
		}
		if e := r.GetEvent(); e != nil {
			if len(events) > 0 && e.GetEventId() <= events[len(events)-1].GetEventId() {
				t.Fatalf("event %d after %d", e.GetEventId(), events[len(events)-1].GetEventId())
			}
			if e.GetType() == "JOB_STATUS_CHANGED" && r.GetJob() == nil {
				t.Fatalf("a status change to %s came without the job", e.GetToStatus())
			}
			events = append(events, e)
		}
	}
	if last.GetStatus() != luciusv1.JobStatus_JOB_STATUS_SUCCEEDED {
		t.Fatalf("the stream ended with the job %v", last.GetStatus())
	}
	all, err := s.jobs.ListJobEvents(s.ctx, &luciusv1.ListJobEventsRequest{JobId: id, PageSize: 500})
	if err != nil {
		t.Fatal(err)
	}
	// Everything after event 1 up to the terminal status change, in order.
	var want []int64
	for _, e := range all.GetEvents() {
		if e.GetEventId() > 1 && e.GetEventId() <= events[len(events)-1].GetEventId() {
			want = append(want, e.GetEventId())
		}
	}
	if len(want) != len(events) || len(events) < 10 {
		t.Fatalf("streamed %d events, the trail has %d in that range", len(events), len(want))
	}
	for i := range want {
		if events[i].GetEventId() != want[i] {
			t.Fatalf("event %d: streamed %d, want %d", i, events[i].GetEventId(), want[i])
		}
	}

	// A resumed watch of the ended job: the job, then what came after.
	mid := events[len(events)/2].GetEventId()
	resumed, err := s.jobs.WatchJob(s.ctx, &luciusv1.WatchJobRequest{JobId: id, AfterEventId: mid})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for {
		r, err := resumed.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if e := r.GetEvent(); e != nil {
			if e.GetEventId() <= mid {
				t.Fatalf("a resumed watch repeated event %d (after %d)", e.GetEventId(), mid)
			}
			n++
		}
	}
	if n == 0 {
		t.Fatal("a resumed watch of an ended job sent no events")
	}

	// REST: newline-delimited JSON.
	req, _ := http.NewRequestWithContext(s.ctx, http.MethodGet, "http://"+s.Endpoints.GatewayHTTP+"/v1/jobs/"+id+":watch", nil)
	req.Header.Set("Authorization", "Bearer "+s.operator)
	httpResp, err := s.httpc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer httpResp.Body.Close()
	sc := bufio.NewScanner(httpResp.Body)
	lines := 0
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil || m["result"] == nil {
			t.Fatalf("REST line %q: %v", sc.Text(), err)
		}
		lines++
	}
	if httpResp.StatusCode != http.StatusOK || lines != 1 {
		t.Fatalf("REST watch of an ended job: %d, %d lines (want the job alone)", httpResp.StatusCode, lines)
	}

	// Browsers: Server-Sent Events.
	req, _ = http.NewRequestWithContext(s.ctx, http.MethodGet, "http://"+s.Endpoints.GatewayHTTP+"/v1/jobs/"+id+":watch", nil)
	req.Header.Set("Authorization", "Bearer "+s.operator)
	req.Header.Set("Accept", "text/event-stream")
	sse, err := s.httpc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer sse.Body.Close()
	body, _ := io.ReadAll(sse.Body)
	if ct := sse.Header.Get("Content-Type"); ct != "text/event-stream" || !strings.HasPrefix(string(body), "data: {\"result\":") ||
		!strings.HasSuffix(string(body), "}\n\n") {
		t.Fatalf("SSE watch: %s %q", ct, body)
	}

	// Another tenant's job is not found; a bad id is a field violation.
	conn, err := server.Dial(s.Endpoints.GatewayGRPC, grpc.WithPerRPCCredentials(auth.BearerToken(s.partner("globex"))))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	st, err := luciusv1.NewJobServiceClient(conn).WatchJob(s.ctx, &luciusv1.WatchJobRequest{JobId: id})
	if err == nil {
		_, err = st.Recv()
	}
	if status.Code(err) != codes.NotFound {
		t.Fatalf("another tenant watches: %v", err)
	}
	st, err = s.jobs.WatchJob(s.ctx, &luciusv1.WatchJobRequest{JobId: "nope"})
	if err == nil {
		_, err = st.Recv()
	}
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("a bad job id: %v", err)
	}
}

// WatchJobs streams the job-level events of a tenant's jobs as they commit,
// each with its job, in order, and nothing of another tenant's.
func TestWatchJobsStreamsATenantsJobs(t *testing.T) {
	t.Parallel()
	s := startSuite(t, suiteOptions{})
	ctx, cancel := context.WithTimeout(s.ctx, 60*time.Second)
	defer cancel()
	stream, err := s.jobs.WatchJobs(ctx, &luciusv1.WatchJobsRequest{TenantId: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // the stream is registered before the jobs are submitted
	out, _ := s.output("watchjobs.json")
	input := s.input("watchjobs.txt", sampleText)
	mine := map[string]bool{s.submitAs("acme", "OCR", map[string]any{}, input, out, ""): true,
		s.submitAs("acme", "OCR", map[string]any{}, input, out+".2", ""): true}
	s.submitAs("globex", "OCR", map[string]any{}, input, out+".globex", "")
	succeeded := map[string]bool{}
	var last int64
	for len(succeeded) < len(mine) {
		r, err := stream.Recv()
		if err != nil {
			t.Fatalf("after %d jobs succeeded: %v", len(succeeded), err)
		}
		e := r.GetEvent()
		if !mine[e.GetJobId()] || r.GetJob().GetTenantId() != "acme" {
			t.Fatalf("an event of another job or tenant: %v %v", e, r.GetJob().GetTenantId())
		}
		if e.GetEventId() <= last {
			t.Fatalf("event %d after %d", e.GetEventId(), last)
		}
		last = e.GetEventId()
		if e.GetType() == "JOB_STATUS_CHANGED" && e.GetToStatus() == "SUCCEEDED" {
			succeeded[e.GetJobId()] = true
		}
	}
}
