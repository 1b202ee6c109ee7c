package e2e

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
)

// Every process exports its spans to the OTLP endpoint the standard
// environment names, and a job's spans (the gateway's, the reconciler's, the
// orchestrator's, the workers', and the database queries made on their
// behalf) all arrive under the one trace the submit began.
func TestSpansOfEveryProcessReachTheCollectorUnderTheJobsTrace(t *testing.T) {
	t.Parallel()
	col := newCollector(t)
	s := startSuite(t, suiteOptions{env: map[string]string{
		"OTEL_EXPORTER_OTLP_ENDPOINT": col.url, // http://: OTLP/HTTP without TLS
		"OTEL_BSP_SCHEDULE_DELAY":     "100",   // ms: spans leave promptly
	}})

	traceID, parent := randomHex(16), randomHex(8)
	ctx := metadata.AppendToOutgoingContext(s.ctx, "traceparent", fmt.Sprintf("00-%s-%s-01", traceID, parent))
	out, _ := s.output("traced.json")
	payload, _ := structpb.NewStruct(map[string]any{"prompt_set": []any{"what is traced?"}})
	resp, err := s.cmds.Submit(ctx, &luciusv1.SubmitRequest{Command: &luciusv1.Command{TenantId: "acme",
		RequestType: "OCR_EMBEDDING_SIS", SchemaVersion: "1", InputRef: s.input("traced.txt", sampleText), OutputRef: out, Payload: payload}})
	if err != nil {
		t.Fatal(err)
	}
	if job := s.waitJob(resp.GetJobId(), time.Minute); job.GetStatus() != luciusv1.JobStatus_JOB_STATUS_SUCCEEDED {
		t.Fatalf("job %s", job.GetStatus())
	}

	want := []string{"lucius-gateway", "lucius-reconciler", "lucius-orchestrator", "lucius-worker-ocr", "lucius-worker-embedding", "lucius-worker-sis"}
	deadline := time.Now().Add(20 * time.Second)
	for {
		services, dbServices := col.trace(traceID)
		missing := []string{}
		for _, w := range want {
			if services[w] == 0 {
				missing = append(missing, w)
			}
		}
		// Queries are spans of their own, children of the work that made them.
		if dbServices["lucius-gateway"] == 0 || dbServices["lucius-orchestrator"] == 0 {
			missing = append(missing, "database spans of the gateway and the orchestrator")
		}
		if len(missing) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("trace %s lacks spans from %v; it has %v (database spans: %v); services seen: %v",
				traceID, missing, services, dbServices, col.services())
		}
		time.Sleep(200 * time.Millisecond)
	}
	assertOneTrace(t, s, resp.GetJobId())
}

// collector is an OTLP/HTTP trace receiver: it keeps, per trace id, how
// many spans each service sent and how many of those were database queries.
type collector struct {
	url  string
	mu   sync.Mutex
	span map[string]map[string]int // trace id → service.name → spans
	db   map[string]map[string]int // trace id → service.name → database spans
	seen map[string]bool           // every service.name that exported
}

func newCollector(t *testing.T) *collector {
	c := &collector{span: map[string]map[string]int{}, db: map[string]map[string]int{}, seen: map[string]bool{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		req := &coltrace.ExportTraceServiceRequest{}
		if err != nil || r.URL.Path != "/v1/traces" || proto.Unmarshal(body, req) != nil {
			http.Error(w, "want an OTLP/HTTP protobuf trace export at /v1/traces", http.StatusBadRequest)
			return
		}
		c.add(req)
		ack, _ := proto.Marshal(&coltrace.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.Write(ack) //nolint:errcheck // the exporter retries what did not arrive
	}))
	t.Cleanup(srv.Close)
	c.url = srv.URL
	return c
}

func (c *collector) add(req *coltrace.ExportTraceServiceRequest) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		service := ""
		for _, kv := range rs.GetResource().GetAttributes() {
			if kv.GetKey() == "service.name" {
				service = kv.GetValue().GetStringValue()
			}
		}
		c.seen[service] = true
		for _, ss := range rs.GetScopeSpans() {
			for _, sp := range ss.GetSpans() {
				id := hex.EncodeToString(sp.GetTraceId())
				if c.span[id] == nil {
					c.span[id], c.db[id] = map[string]int{}, map[string]int{}
				}
				c.span[id][service]++
				for _, kv := range sp.GetAttributes() {
					if strings.HasPrefix(kv.GetKey(), "db.system") && kv.GetValue().GetStringValue() == "postgresql" {
						c.db[id][service]++
					}
				}
			}
		}
	}
}

// trace returns a copy of what arrived for a trace id.
func (c *collector) trace(id string) (spans, db map[string]int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	spans, db = map[string]int{}, map[string]int{}
	for k, v := range c.span[id] {
		spans[k] = v
	}
	for k, v := range c.db[id] {
		db[k] = v
	}
	return spans, db
}

func (c *collector) services() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for s := range c.seen {
		out = append(out, s)
	}
	sort.Strings(out)
	return out
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b) //nolint:errcheck // crypto/rand does not fail
	return hex.EncodeToString(b)
}
