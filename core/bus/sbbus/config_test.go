package sbbus

import (
	"testing"
	"time"
)

func TestConfigFromEnv(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		env     map[string]string
		want    Config
		wantErr bool
	}{
		{"connection string", map[string]string{EnvConnectionString: "Endpoint=sb://x/;SharedAccessKeyName=k;SharedAccessKey=v"},
			Config{ConnectionString: "Endpoint=sb://x/;SharedAccessKeyName=k;SharedAccessKey=v"}, false},
		{"namespace without provisioning", map[string]string{EnvNamespace: "ns.servicebus.windows.net", EnvProvision: "false"},
			Config{Namespace: "ns.servicebus.windows.net", SkipProvisioning: true}, false},
		{"provisioning on", map[string]string{EnvNamespace: "ns.servicebus.windows.net", EnvProvision: "true"},
			Config{Namespace: "ns.servicebus.windows.net"}, false},
		{"emulator", map[string]string{EnvConnectionString: "Endpoint=sb://localhost;UseDevelopmentEmulator=true", EnvAdminEndpoint: "http://localhost:5300"},
			Config{ConnectionString: "Endpoint=sb://localhost;UseDevelopmentEmulator=true", AdminEndpoint: "http://localhost:5300"}, false},
		{"admin endpoint not a URL", map[string]string{EnvNamespace: "ns.servicebus.windows.net", EnvAdminEndpoint: "localhost"}, Config{}, true},
		{"neither", map[string]string{}, Config{}, true},
		{"both", map[string]string{EnvNamespace: "ns.servicebus.windows.net", EnvConnectionString: "Endpoint=sb://x/"}, Config{}, true},
		{"namespace as URL", map[string]string{EnvNamespace: "sb://ns.servicebus.windows.net/"}, Config{}, true},
		{"bad provision flag", map[string]string{EnvNamespace: "ns.servicebus.windows.net", EnvProvision: "maybe"}, Config{}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := ConfigFromEnv(func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok })
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %v", err, tc.wantErr)
			}
			if err == nil && got != tc.want {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestDurationIsISO8601(t *testing.T) {
	t.Parallel()
	for d, want := range map[time.Duration]string{
		500 * time.Millisecond:                 "P0DT0H0M0.5S",
		time.Minute:                            "P0DT0H1M0S",
		14 * 24 * time.Hour:                    "P14DT0H0M0S",
		90*time.Minute + 1500*time.Millisecond: "P0DT1H30M1.5S",
	} {
		if got := *duration(d); got != want {
			t.Errorf("duration(%v) = %s, want %s", d, got, want)
		}
	}
}
