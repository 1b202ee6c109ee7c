package process

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/lucius-platform/lucius/base/env"
)

// testConfig is a service config as the services have: process.Service embedded.
type testConfig struct {
	Service
	Other string
}

func TestHealthcheckAsksTheServicesOwnHTTPAddress(t *testing.T) {
	t.Parallel()
	healthy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" {
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(healthy.Close)
	sick := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	t.Cleanup(sick.Close)
	_, healthyPort, _ := net.SplitHostPort(healthy.Listener.Addr().String())
	closed := httptest.NewServer(http.NotFoundHandler())
	closedAddr := closed.Listener.Addr().String()
	closed.Close()

	tests := []struct {
		name string
		env  map[string]string
		want string // "" for success, else a word of the error
	}{
		{"healthy", map[string]string{"LUCIUS_GATEWAY_HTTP_ADDR": healthy.Listener.Addr().String()}, ""},
		{"an unspecified host is this machine", map[string]string{"LUCIUS_GATEWAY_HTTP_ADDR": "0.0.0.0:" + healthyPort}, ""},
		{"a missing setting the check does not need", map[string]string{"LUCIUS_GATEWAY_HTTP_ADDR": healthy.Listener.Addr().String(),
			"DATABASE_URL": ""}, ""},
		{"unhealthy", map[string]string{"LUCIUS_GATEWAY_HTTP_ADDR": sick.Listener.Addr().String()}, "503"},
		{"nobody listening", map[string]string{"LUCIUS_GATEWAY_HTTP_ADDR": closedAddr}, "refused"},
		{"a bad address", map[string]string{"LUCIUS_GATEWAY_HTTP_ADDR": "nowhere"}, "HTTP address"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			vars := map[string]string{"DATABASE_URL": "postgres://x"}
			for k, v := range tt.env {
				vars[k] = v
			}
			configure := func(e *env.Reader) (testConfig, error) {
				return testConfig{Service: ReadService(e, "gateway", "127.0.0.1:9090", "127.0.0.1:8080", 20)}, nil
			}
			err := healthcheck(context.Background(), env.FromMap(vars), configure)
			if tt.want == "" && err != nil {
				t.Fatalf("healthcheck: %v", err)
			}
			if tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)) {
				t.Fatalf("healthcheck = %v, want an error with %q", err, tt.want)
			}
		})
	}
}

func TestHealthcheckRefusesAConfigWithoutAnHTTPAddress(t *testing.T) {
	t.Parallel()
	configure := func(*env.Reader) (struct{ Addr string }, error) { return struct{ Addr string }{"127.0.0.1:1"}, nil }
	if err := healthcheck(context.Background(), env.FromMap(nil), configure); err == nil || !strings.Contains(err.Error(), "no HTTP address") {
		t.Fatalf("healthcheck = %v, want an error", err)
	}
}
