package worker

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/lucius-platform/lucius/base/auth/authtest"
	"github.com/lucius-platform/lucius/base/env"
	"github.com/lucius-platform/lucius/bus/routing"
	"github.com/lucius-platform/lucius/sdk/worker/blob"
)

// examples is a catalog shaped like the example worker's.
var examples = func() []Service {
	var none HandlerFunc = func(context.Context, *Task) (Result, error) { return Result{}, nil }
	return []Service{
		{Name: "ocr", Executor: none, Handlers: []string{"OCR"}},
		{Name: "embedding", Executor: none, Handlers: []string{"EMBEDDING"}},
		{Name: "sis", Executor: none, Handlers: []string{"SIS"}},
		Serve("raster", Handlers{"raster_validate": none, "raster_cog_fa": none}),
		Serve("tiles", Handlers{"tiles_plan": none}),
		{Name: "phased", Executor: none, Handlers: []string{"PHASED"}},
		{Name: "demo", Executor: none},
	}
}()

func TestReadSettings(t *testing.T) {
	t.Parallel()
	tokenFile := authtest.New(t).TokenFile(t, authtest.Worker("ocr"))
	base := map[string]string{"DATABASE_URL": "postgres://localhost/lucius", "LUCIUS_WORKER_SERVICE": "ocr",
		"LUCIUS_AUTH_TOKEN_FILE": tokenFile}
	with := func(kv ...string) map[string]string {
		m := map[string]string{}
		for k, v := range base {
			m[k] = v
		}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	for _, tc := range []struct {
		name     string
		env      map[string]string
		wantErr  string
		services string // on success, the services to run, comma-joined; default the variable itself
	}{
		{"minimal", base, "", ""},
		{"every setting", with("LUCIUS_TOPOLOGY", "one-topic-set", "LUCIUS_WORKER_CONCURRENCY", "16", "LUCIUS_WORKER_NOOP", "true",
			"LUCIUS_INSTANCE", "worker-ocr-1", "LUCIUS_WORKER_HTTP_ADDR", "127.0.0.1:0", "LUCIUS_LOG_LEVEL", "debug",
			"LUCIUS_WORKER_DELAY", "1200ms", "LUCIUS_WORKER_STORE", "postgres"), "", ""},
		{"negative delay", with("LUCIUS_WORKER_DELAY", "-1s"), "execution delay -1s is negative", ""},
		{"noop runs any service", with("LUCIUS_WORKER_SERVICE", "geo", "LUCIUS_WORKER_NOOP", "1"), "", ""},
		{"unknown service", with("LUCIUS_WORKER_SERVICE", "geo"), `names "geo": want one of demo, embedding, ocr, phased, raster, sis, tiles`, ""},
		{"raster", with("LUCIUS_WORKER_SERVICE", "raster"), "", ""},
		{"tiles", with("LUCIUS_WORKER_SERVICE", "tiles"), "", ""},
		{"several services", with("LUCIUS_WORKER_SERVICE", "raster,tiles"), "", "raster,tiles"},
		{"a list with spaces and empty items", with("LUCIUS_WORKER_SERVICE", " raster , ,tiles,ocr, "), "", "raster,tiles,ocr"},
		{"a service listed twice", with("LUCIUS_WORKER_SERVICE", "raster,tiles,raster"), `"raster" is listed twice`, ""},
		{"an unknown service in a list", with("LUCIUS_WORKER_SERVICE", "raster,geo"), `names "geo": want one of`, ""},
		{"only commas", with("LUCIUS_WORKER_SERVICE", ", ,"), "LUCIUS_WORKER_SERVICE names no service", ""},
		{"noop runs any list", with("LUCIUS_WORKER_SERVICE", "geo,hydro", "LUCIUS_WORKER_NOOP", "true"), "", "geo,hydro"},
		{"a bad name in a noop list", with("LUCIUS_WORKER_SERVICE", "geo,Hydro!", "LUCIUS_WORKER_NOOP", "true"), `service "Hydro!": want lowercase letters`, ""},
		{"missing database", map[string]string{"LUCIUS_WORKER_SERVICE": "ocr", "LUCIUS_AUTH_TOKEN_FILE": tokenFile}, "DATABASE_URL is required", ""},
		{"missing service", map[string]string{"DATABASE_URL": "x", "LUCIUS_AUTH_TOKEN_FILE": tokenFile}, "LUCIUS_WORKER_SERVICE is required", ""},
		{"no callback credentials", map[string]string{"DATABASE_URL": "x", "LUCIUS_WORKER_SERVICE": "ocr"}, "LUCIUS_AUTH_TOKEN_FILE or LUCIUS_CALLBACK_TLS_CERT_FILE is required", ""},
		{"missing token file", with("LUCIUS_AUTH_TOKEN_FILE", "/nonexistent/token"), "token file", ""},
		{"bad concurrency", with("LUCIUS_WORKER_CONCURRENCY", "many"), "want an integer", ""},
		{"file roots", with("LUCIUS_FILE_ROOTS", "/srv/in: /srv/out :"), "", ""},
		{"a relative file root", with("LUCIUS_FILE_ROOTS", "/srv/in:data"), `file root "data" is not an absolute path`, ""},
		{"the whole filesystem as a file root", with("LUCIUS_FILE_ROOTS", "/"), `file root "/" would allow every file`, ""},
		{"negative concurrency", with("LUCIUS_WORKER_CONCURRENCY", "-2"), "concurrency -2 is negative", ""},
		{"prefetch", with("LUCIUS_WORKER_PREFETCH", "16"), "", ""},
		{"prefetch over the limit", with("LUCIUS_WORKER_PREFETCH", "1000"), "prefetch 1000: want 1-256", ""},
		{"negative prefetch", with("LUCIUS_WORKER_PREFETCH", "-1"), "prefetch -1: want 1-256", ""},
		{"negative concurrency, several services", with("LUCIUS_WORKER_SERVICE", "raster,tiles", "LUCIUS_WORKER_CONCURRENCY", "-2"),
			"concurrency -2 is negative", ""},
		{"bad topology", with("LUCIUS_TOPOLOGY", "mesh"), "unknown topology", ""},
		{"bad noop", with("LUCIUS_WORKER_NOOP", "maybe"), "want true or false", ""},
		{"postgres bus", with("LUCIUS_BUS", "postgres", "LUCIUS_BUS_POLL_INTERVAL", "200ms"), "", ""},
		{"bad bus poll interval", with("LUCIUS_BUS_POLL_INTERVAL", "often"), "want a duration", ""},
		{"unknown bus", with("LUCIUS_BUS", "kafka"), "want postgres or servicebus", ""},
		{"service bus", with("LUCIUS_BUS", "servicebus", "LUCIUS_SERVICEBUS_NAMESPACE", "lucius.servicebus.windows.net"), "", ""},
		{"service bus without a namespace", with("LUCIUS_BUS", "servicebus"), "set LUCIUS_SERVICEBUS_CONNECTION_STRING or LUCIUS_SERVICEBUS_NAMESPACE", ""},
		{"azurite", with("LUCIUS_BLOB_ENDPOINTS", "devstoreaccount1=http://127.0.0.1:10000/devstoreaccount1", "LUCIUS_BLOB_CREDENTIAL", "shared-key",
			"LUCIUS_BLOB_ACCOUNT_KEYS", "devstoreaccount1=a2V5", "LUCIUS_BLOB_BLOCK_SIZE", "8388608", "LUCIUS_EGRESS_ALLOW", "10.20.0.0/16",
			"LUCIUS_WORKER_INLINE_OUTPUT_BYTES", "65536"), "", ""},
		{"workload identity", with("LUCIUS_BLOB_CREDENTIAL", "workload-identity"), "", ""},
		{"unknown blob credential", with("LUCIUS_BLOB_CREDENTIAL", "password"), `credential mode "password"`, ""},
		{"account keys without shared-key", with("LUCIUS_BLOB_ACCOUNT_KEYS", "acct01=a2V5"), "account keys are set", ""},
		{"a malformed endpoint list", with("LUCIUS_BLOB_ENDPOINTS", "acct01"), "LUCIUS_BLOB_ENDPOINTS: item 1: want account=value", ""},
		{"an endpoint that is not a URL", with("LUCIUS_BLOB_ENDPOINTS", "acct01=ftp://x"), "endpoint of acct01", ""},
		{"a small block size", with("LUCIUS_BLOB_BLOCK_SIZE", "1024"), "block size 1024", ""},
		{"a bad egress allowlist", with("LUCIUS_EGRESS_ALLOW", "intranet"), "LUCIUS_EGRESS_ALLOW", ""},
		{"ack linger", with("LUCIUS_WORKER_ACK_LINGER", "20ms"), "", ""},
		{"ack linger too long", with("LUCIUS_WORKER_ACK_LINGER", "2s"), "ack linger 2s: want at most 500ms", ""},
		{"local store", with("LUCIUS_WORKER_STORE", "local", "LUCIUS_WORKER_STORE_PATH", "/var/lib/worker/ocr.db"), "", ""},
		{"local store without a path", with("LUCIUS_WORKER_STORE", "local"), "needs LUCIUS_WORKER_STORE_PATH", ""},
		{"unknown store", with("LUCIUS_WORKER_STORE", "redis"), `LUCIUS_WORKER_STORE="redis": want postgres or local`, ""},
		{"no database credentials: service bus and a local store", map[string]string{"LUCIUS_WORKER_SERVICE": "ocr",
			"LUCIUS_AUTH_TOKEN_FILE": tokenFile, "LUCIUS_BUS": "servicebus", "LUCIUS_SERVICEBUS_NAMESPACE": "lucius.servicebus.windows.net",
			"LUCIUS_WORKER_STORE": "local", "LUCIUS_WORKER_STORE_PATH": "/var/lib/worker/ocr.db"}, "", ""},
		{"service bus still needs a database for the postgres store", map[string]string{"LUCIUS_WORKER_SERVICE": "ocr",
			"LUCIUS_AUTH_TOKEN_FILE": tokenFile, "LUCIUS_BUS": "servicebus", "LUCIUS_SERVICEBUS_NAMESPACE": "lucius.servicebus.windows.net"},
			"DATABASE_URL is required", ""},
		{"a negative inline output limit", with("LUCIUS_WORKER_INLINE_OUTPUT_BYTES", "-1"), "inline output limit -1 is negative", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, err := readSettings(env.FromMap(tc.env), examples)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				want := tc.services
				if want == "" {
					want = tc.env["LUCIUS_WORKER_SERVICE"]
				}
				if strings.Join(s.names(), ",") != want || s.runner.Service != "" || s.httpAddr == "" {
					t.Errorf("settings = %+v, want services %s", s, want)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err = %v, want %q", err, tc.wantErr)
			}
			if n := strings.Count(err.Error(), tc.wantErr); n != 1 {
				t.Errorf("err reports %q %d times:\n%v", tc.wantErr, n, err)
			}
		})
	}
	s, _ := readSettings(env.FromMap(base), examples)
	if s.httpAddr != "127.0.0.1:8090" || s.runner.Concurrency != 4 || s.runner.NoOp || s.store != StorePostgres || s.runner.Topology != routing.TopologyTwoTopicSets ||
		len(s.services) != 1 || s.services[0].Name != "ocr" || !slices.Equal(s.services[0].Handlers, []string{"OCR"}) || s.telemetry.Service != "worker-ocr" {
		t.Errorf("defaults = %+v", s)
	}
	if s.runner.Azure.Credential != blob.CredentialDefault || len(s.runner.Azure.Endpoints) != 0 || s.runner.InlineOutputLimit != DefaultInlineOutputLimit ||
		len(s.runner.Egress.Allow) != 0 {
		t.Errorf("blob defaults = %+v, inline limit %d, egress %v", s.runner.Azure, s.runner.InlineOutputLimit, s.runner.Egress)
	}
	s, _ = readSettings(env.FromMap(with("LUCIUS_BLOB_ENDPOINTS", "devstoreaccount1=http://127.0.0.1:10000/devstoreaccount1",
		"LUCIUS_BLOB_CREDENTIAL", "shared-key", "LUCIUS_BLOB_ACCOUNT_KEYS", "devstoreaccount1=a2V5", "LUCIUS_EGRESS_ALLOW", "10.20.0.0/16")), examples)
	if s.runner.Azure.Endpoints["devstoreaccount1"] != "http://127.0.0.1:10000/devstoreaccount1" || s.runner.Azure.AccountKeys["devstoreaccount1"] != "a2V5" ||
		s.runner.Azure.Credential != blob.CredentialSharedKey || len(s.runner.Egress.Allow) != 1 {
		t.Errorf("blob settings = %+v, egress %v", s.runner.Azure, s.runner.Egress)
	}
	s, _ = readSettings(env.FromMap(with("LUCIUS_WORKER_SERVICE", "raster,tiles")), examples)
	if s.telemetry.Service != "worker-raster-tiles" {
		t.Errorf("telemetry service = %q, want worker-raster-tiles", s.telemetry.Service)
	}
}

// TestPickServices covers the catalogs Run meets: the handlers registered
// with Handle (one unnamed service), one named service, several.
func TestPickServices(t *testing.T) {
	t.Parallel()
	none := HandlerFunc(func(context.Context, *Task) (Result, error) { return Result{}, nil })
	registeredOnly := []Service{{Executor: Handlers{"REVERSE": none}, Handlers: []string{"REVERSE"}}}
	nothingRegistered := []Service{{Executor: Handlers{}}}
	for _, tc := range []struct {
		name     string
		catalog  []Service
		env      map[string]string
		want     string // names, comma-joined
		handlers string // the first service's announced handlers, comma-joined
		wantErr  string
	}{
		{"registered handlers under the configured name", registeredOnly, map[string]string{"LUCIUS_WORKER_SERVICE": "reverser"}, "reverser", "REVERSE", ""},
		{"registered handlers need a name", registeredOnly, map[string]string{}, "", "", "LUCIUS_WORKER_SERVICE is required"},
		{"registered handlers run as one service", registeredOnly, map[string]string{"LUCIUS_WORKER_SERVICE": "a,b"}, "", "", "the registered handlers run as one"},
		{"nothing registered", nothingRegistered, map[string]string{"LUCIUS_WORKER_SERVICE": "reverser"}, "", "", "no handler is registered"},
		{"nothing registered, no-op", nothingRegistered, map[string]string{"LUCIUS_WORKER_SERVICE": "reverser", "LUCIUS_WORKER_NOOP": "true"}, "reverser", "", ""},
		{"one named service needs no variable", examples[:1], map[string]string{}, "ocr", "OCR", ""},
		{"several named services need the variable", examples, map[string]string{}, "", "", "LUCIUS_WORKER_SERVICE is required"},
		{"no-op services announce nothing", examples, map[string]string{"LUCIUS_WORKER_SERVICE": "ocr", "LUCIUS_WORKER_NOOP": "true"}, "ocr", "", ""},
		{"only commas", examples, map[string]string{"LUCIUS_WORKER_SERVICE": " , "}, "", "", "names no service"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := env.FromMap(tc.env)
			got, err := pickServices(e, tc.catalog, e.Bool("LUCIUS_WORKER_NOOP", false))
			if err == nil {
				err = e.Err()
			}
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			names := settings{services: got}.names()
			if strings.Join(names, ",") != tc.want || strings.Join(got[0].Handlers, ",") != tc.handlers {
				t.Errorf("picked %v with handlers %v, want %s with %s", names, got[0].Handlers, tc.want, tc.handlers)
			}
		})
	}
}
