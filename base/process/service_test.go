package process

import (
	"strings"
	"testing"
	"time"

	"github.com/lucius-platform/lucius/base/auth"
	"github.com/lucius-platform/lucius/base/auth/authtest"
	"github.com/lucius-platform/lucius/base/env"
	"github.com/lucius-platform/lucius/base/server"
)

func TestReadServiceReadsTheRequestLimits(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		env  map[string]string
		want server.Limits
		bad  string // a word Validate's error names
	}{
		{"defaults", nil, server.Limits{MaxRequestBytes: 1 << 20, MaxHeaderBytes: 64 << 10, MaxJSONDepth: 100,
			ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 30 * time.Second, WriteTimeout: time.Minute, IdleTimeout: 2 * time.Minute}, ""},
		{"set", map[string]string{"LUCIUS_MAX_REQUEST_BYTES": "2097152", "LUCIUS_MAX_JSON_DEPTH": "20",
			"LUCIUS_HTTP_MAX_HEADER_BYTES": "8192", "LUCIUS_HTTP_READ_HEADER_TIMEOUT": "1s", "LUCIUS_HTTP_READ_TIMEOUT": "10s",
			"LUCIUS_HTTP_WRITE_TIMEOUT": "90s", "LUCIUS_HTTP_IDLE_TIMEOUT": "30s"},
			server.Limits{MaxRequestBytes: 2 << 20, MaxHeaderBytes: 8 << 10, MaxJSONDepth: 20, ReadHeaderTimeout: time.Second,
				ReadTimeout: 10 * time.Second, WriteTimeout: 90 * time.Second, IdleTimeout: 30 * time.Second}, ""},
		{"a request limit no request fits", map[string]string{"LUCIUS_MAX_REQUEST_BYTES": "10"}, server.Limits{}, "MaxRequestBytes"},
		{"a negative timeout", map[string]string{"LUCIUS_HTTP_READ_TIMEOUT": "-1s"}, server.Limits{}, "ReadTimeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			vars := map[string]string{"DATABASE_URL": "postgres://x"}
			for k, v := range tt.env {
				vars[k] = v
			}
			e := env.FromMap(vars)
			s := ReadService(e, "gateway", "127.0.0.1:9090", "127.0.0.1:8080", 20)
			if err := e.Err(); err != nil {
				t.Fatal(err)
			}
			s.Defaults("", "", 0)
			err := s.Validate()
			if tt.bad != "" {
				if err == nil || !strings.Contains(err.Error(), tt.bad) {
					t.Fatalf("Validate() = %v, want an error naming %s", err, tt.bad)
				}
				return
			}
			if err != nil || s.Limits != tt.want {
				t.Fatalf("limits %+v (%v), want %+v", s.Limits, err, tt.want)
			}
		})
	}
}

// An endpoint verifies with the Authenticator it is given instead of
// building one from Auth: here Auth alone would be refused.
func TestEndpointUsesTheAuthenticatorItIsGiven(t *testing.T) {
	t.Parallel()
	svc := Service{GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", Auth: auth.Config{ClockSkew: -time.Second}}
	if ep, err := svc.Endpoint(nil); err == nil || !strings.Contains(err.Error(), "clock skew") {
		if ep != nil {
			ep.Close()
		}
		t.Fatalf("Endpoint from a bad Auth = %v, want the clock skew refused", err)
	}
	svc.Authenticator = authtest.New(t).Authn
	ep, err := svc.Endpoint(nil)
	if err != nil {
		t.Fatalf("Endpoint with an Authenticator: %v", err)
	}
	ep.Close()
}
