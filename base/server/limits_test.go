package server

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
)

// fakeAPI answers Submit with a fixed job, and ListJobs with one job whose
// payload holds bigPayload bytes (an answer larger than gRPC's default 4 MiB).
type fakeAPI struct {
	luciusv1.UnimplementedCommandServiceServer
	luciusv1.UnimplementedJobServiceServer
	bigPayload int
}

func (fakeAPI) Submit(context.Context, *luciusv1.SubmitRequest) (*luciusv1.SubmitResponse, error) {
	return &luciusv1.SubmitResponse{JobId: strings.Repeat("a", 64)}, nil
}

func (f fakeAPI) ListJobs(context.Context, *luciusv1.ListJobsRequest) (*luciusv1.ListJobsResponse, error) {
	payload, err := structpb.NewStruct(map[string]any{"blob": strings.Repeat("x", f.bigPayload)})
	if err != nil {
		return nil, err
	}
	return &luciusv1.ListJobsResponse{Jobs: []*luciusv1.Job{{JobId: "big", Payload: payload}}}, nil
}

// admitAll is a guard that lets every call through: these tests are about
// limits, and package auth (which imports this one) has its own tests.
type admitAll struct{}

func (admitAll) UnaryServerInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		return h(ctx, req)
	}
}

func (admitAll) StreamServerInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		return h(srv, ss)
	}
}

func (admitAll) HTTP(h http.Handler) http.Handler { return h }

// serveEndpoint serves an endpoint with the fake API over gRPC and REST until
// the test ends.
func serveEndpoint(t *testing.T, limits Limits) *Endpoint {
	t.Helper()
	ep, err := NewEndpoint(EndpointConfig{GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", Logger: slog.New(slog.DiscardHandler),
		Guard: admitAll{}, Limits: limits})
	if err != nil {
		t.Fatal(err)
	}
	api := fakeAPI{bigPayload: 6 << 20}
	luciusv1.RegisterCommandServiceServer(ep.GRPC, api)
	luciusv1.RegisterJobServiceServer(ep.GRPC, api)
	ctx, cancel := context.WithCancel(context.Background())
	if err := luciusv1.RegisterCommandServiceHandler(ctx, ep.REST, ep.Conn()); err != nil {
		t.Fatal(err)
	}
	if err := luciusv1.RegisterJobServiceHandler(ctx, ep.REST, ep.Conn()); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		done <- ep.Serve(ctx, time.Second, nil, func(context.Context) error { return nil })
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return ep
}

// commandJSON is a valid SubmitRequest body whose payload is payloadJSON.
func commandJSON(payloadJSON string) string {
	return `{"tenant_id":"acme","request_type":"OCR_EMBEDDING_SIS","input_ref":"file:///data/in.txt",` +
		`"output_ref":"file:///data/out.json","schema_version":"1.0","payload":` + payloadJSON + `}`
}

// rawPost sends a POST /v1/commands over a plain connection, with the given
// framing headers, writes body in the background (the server may answer and
// close before it is all sent) and reads the answer.
func rawPost(t *testing.T, addr, framing string, body io.Reader) (*http.Response, []byte) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(conn, "POST /v1/commands HTTP/1.1\r\nHost: lucius\r\nContent-Type: application/json\r\n"+framing+"\r\n"); err != nil {
		t.Fatal(err)
	}
	go io.Copy(conn, body) //nolint:errcheck // the server may stop reading: that is the point
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

// chunked frames r's bytes as HTTP/1.1 chunks.
func chunked(r io.Reader) io.Reader {
	pr, pw := io.Pipe()
	go func() {
		buf := make([]byte, 32<<10)
		for {
			n, err := r.Read(buf)
			if n > 0 {
				if _, werr := fmt.Fprintf(pw, "%x\r\n%s\r\n", n, buf[:n]); werr != nil {
					pw.CloseWithError(werr)
					return
				}
			}
			if err == io.EOF {
				_, werr := io.WriteString(pw, "0\r\n\r\n")
				pw.CloseWithError(werr)
				return
			}
			if err != nil {
				pw.CloseWithError(err)
				return
			}
		}
	}()
	return pr
}

// repeatReader yields prefix then n bytes of c: a large body never held whole.
func repeatReader(prefix string, c byte, n int64) io.Reader {
	return io.MultiReader(strings.NewReader(prefix), io.LimitReader(byteReader(c), n))
}

type byteReader byte

func (b byteReader) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(b)
	}
	return len(p), nil
}

type rpcStatus struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
	Details []struct {
		Type     string            `json:"@type"`
		Reason   string            `json:"reason"`
		Metadata map[string]string `json:"metadata"`
	} `json:"details"`
}

func TestRESTAnswers413ForBodiesOverTheLimit(t *testing.T) {
	t.Parallel()
	ep := serveEndpoint(t, Limits{})
	const tenMB = 10 << 20
	// A payload of many zeros: under the cap as JSON (2 bytes a number),
	// five times over it as a protobuf Struct (11 bytes a number).
	zeros := "[" + strings.Repeat("0,", 300_000) + "0]"
	tests := []struct {
		name    string
		framing string
		body    func() io.Reader
	}{
		{"Content-Length over the limit, refused unread", fmt.Sprintf("Content-Length: %d\r\n", tenMB),
			func() io.Reader { return repeatReader(`{"tenant_id":"`, 'a', tenMB-14) }},
		{"a chunked body read up to the limit", "Transfer-Encoding: chunked\r\n",
			func() io.Reader { return chunked(repeatReader(`{"tenant_id":"`, 'a', tenMB)) }},
		{"a body under the limit whose message is over it", fmt.Sprintf("Content-Length: %d\r\n", len(commandJSON(`{"z":`+zeros+`}`))),
			func() io.Reader { return strings.NewReader(commandJSON(`{"z":` + zeros + `}`)) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			start := time.Now()
			resp, body := rawPost(t, ep.HTTPAddr(), tt.framing, tt.body())
			t.Logf("answered %d in %s", resp.StatusCode, time.Since(start))
			if resp.StatusCode != http.StatusRequestEntityTooLarge {
				t.Fatalf("status %d, want 413: %s", resp.StatusCode, body)
			}
			var st rpcStatus
			if err := json.Unmarshal(body, &st); err != nil {
				t.Fatalf("body %q: %v", body, err)
			}
			if st.Code != int(codes.ResourceExhausted) || len(st.Details) != 1 || st.Details[0].Reason != Reason(luciusv1.ErrorReason_ERROR_REASON_REQUEST_TOO_LARGE) ||
				st.Details[0].Metadata["limit_bytes"] != "1048576" {
				t.Fatalf("body %s", body)
			}
		})
	}
}

func TestRESTAcceptsBodiesUnderTheLimit(t *testing.T) {
	t.Parallel()
	ep := serveEndpoint(t, Limits{})
	for _, framing := range []string{"Content-Length", "chunked"} {
		t.Run(framing, func(t *testing.T) {
			t.Parallel()
			// Near the limit: a payload string of 1 MiB less 4 KiB.
			body := commandJSON(`{"text":"` + strings.Repeat("a", DefaultMaxRequestBytes-4096) + `"}`)
			var resp *http.Response
			var got []byte
			if framing == "chunked" {
				resp, got = rawPost(t, ep.HTTPAddr(), "Transfer-Encoding: chunked\r\n", chunked(strings.NewReader(body)))
			} else {
				resp, got = rawPost(t, ep.HTTPAddr(), fmt.Sprintf("Content-Length: %d\r\n", len(body)), strings.NewReader(body))
			}
			if resp.StatusCode != http.StatusOK || !strings.Contains(string(got), strings.Repeat("a", 64)) {
				t.Fatalf("status %d: %.300s", resp.StatusCode, got)
			}
		})
	}
}

func TestRESTRefusesJSONNestedDeeperThanTheLimit(t *testing.T) {
	t.Parallel()
	ep := serveEndpoint(t, Limits{MaxJSONDepth: 40})
	nested := func(depth int) string { return strings.Repeat(`{"a":`, depth) + "1" + strings.Repeat("}", depth) }
	tests := []struct {
		depth int
		want  int
	}{{30, http.StatusOK}, {40, http.StatusBadRequest}, {5000, http.StatusBadRequest}}
	for _, tt := range tests {
		body := commandJSON(nested(tt.depth))
		resp, got := rawPost(t, ep.HTTPAddr(), fmt.Sprintf("Content-Length: %d\r\n", len(body)), strings.NewReader(body))
		if resp.StatusCode != tt.want {
			t.Fatalf("payload nested %d deep: status %d, want %d: %.300s", tt.depth, resp.StatusCode, tt.want, got)
		}
	}
}

func TestGRPCRefusesMessagesOverTheSameLimit(t *testing.T) {
	t.Parallel()
	ep := serveEndpoint(t, Limits{MaxRequestBytes: 64 << 10})
	conn, err := Dial(ep.GRPCAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := luciusv1.NewCommandServiceClient(conn)
	submit := func(text int) error {
		payload, _ := structpb.NewStruct(map[string]any{"text": strings.Repeat("a", text)})
		_, err := client.Submit(context.Background(), &luciusv1.SubmitRequest{Command: &luciusv1.Command{TenantId: "acme",
			RequestType: "OCR_EMBEDDING_SIS", InputRef: "file:///in", OutputRef: "file:///out", SchemaVersion: "1", Payload: payload}})
		return err
	}
	if err := submit(60 << 10); err != nil {
		t.Fatalf("a message under the limit: %v", err)
	}
	if err := submit(65 << 10); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a message over the limit: %v, want RESOURCE_EXHAUSTED", err)
	}
}

func TestRESTAnswersResponsesLargerThanGRPCDefaults(t *testing.T) {
	t.Parallel()
	ep := serveEndpoint(t, Limits{})
	resp, err := http.Get("http://" + ep.HTTPAddr() + "/v1/jobs")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || len(body) < 6<<20 {
		t.Fatalf("status %d, %d bytes: %.300s", resp.StatusCode, len(body), body)
	}
}

func TestHTTPRefusesHeadersOverTheLimit(t *testing.T) {
	t.Parallel()
	ep := serveEndpoint(t, Limits{})
	req, _ := http.NewRequest(http.MethodGet, "http://"+ep.HTTPAddr()+"/healthz", nil)
	req.Header.Set("X-Big", strings.Repeat("h", 2*DefaultMaxHeaderBytes))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("status %d, want 431", resp.StatusCode)
	}
}

// slowClients opens n connections that each send half a request header, then
// one more header byte every interval, until the test ends or the server
// drops them. It returns once all are connected.
func slowClients(t *testing.T, addr string, n int, interval time.Duration) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	for range n {
		conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: lucius\r\nX-Slow: "); err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer conn.Close()
			tick := time.NewTicker(interval)
			defer tick.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
					if _, err := io.WriteString(conn, "s"); err != nil {
						return
					}
				}
			}
		}()
	}
}

func TestSlowClientsDoNotHoldUpOthers(t *testing.T) {
	t.Parallel()
	ep := serveEndpoint(t, Limits{})
	client := &http.Client{Timeout: 5 * time.Second}
	get := func() time.Duration {
		t.Helper()
		start := time.Now()
		resp, err := client.Get("http://" + ep.HTTPAddr() + "/healthz")
		if err != nil {
			t.Fatalf("/healthz with 200 slow clients: %v", err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("/healthz: status %d", resp.StatusCode)
		}
		return time.Since(start)
	}
	baseline := get()
	slowClients(t, ep.HTTPAddr(), 200, 500*time.Millisecond)
	// Twenty calls over a second and a half, while the slow clients trickle.
	var slowest time.Duration
	for range 20 {
		slowest = max(slowest, get())
		time.Sleep(75 * time.Millisecond)
	}
	t.Logf("/healthz: %s alone, at most %s over 20 calls among 200 slow clients", baseline, slowest)
}

func TestReadHeaderTimeoutDropsSlowHeaderSenders(t *testing.T) {
	t.Parallel()
	ep := serveEndpoint(t, Limits{ReadHeaderTimeout: 200 * time.Millisecond})
	conn, err := net.DialTimeout("tcp", ep.HTTPAddr(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: lucius\r\nX-Slow: "); err != nil {
		t.Fatal(err)
	}
	if err := conn.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = conn.Read(make([]byte, 1))
	if ne, ok := err.(net.Error); err == nil || ok && ne.Timeout() {
		t.Fatalf("the connection is still open after %s: %v", time.Since(start), err)
	}
	t.Logf("dropped after %s: %v", time.Since(start), err)
}

func TestLimitsValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		limits Limits
		bad    string
	}{
		{"defaults", Limits{}, ""},
		{"a small request limit", Limits{MaxRequestBytes: 100}, "MaxRequestBytes"},
		{"a negative header limit", Limits{MaxHeaderBytes: -1}, "MaxHeaderBytes"},
		{"a negative depth", Limits{MaxJSONDepth: -1}, "MaxJSONDepth"},
		{"a negative timeout", Limits{ReadHeaderTimeout: -time.Second}, "ReadHeaderTimeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			l := tt.limits
			l.Defaults()
			err := l.Validate()
			if tt.bad == "" && err != nil || tt.bad != "" && (err == nil || !strings.Contains(err.Error(), tt.bad)) {
				t.Fatalf("Validate() = %v, want an error naming %q", err, tt.bad)
			}
		})
	}
}
