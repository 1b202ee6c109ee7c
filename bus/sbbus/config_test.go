package sbbus

import (
	"testing"
	"time"
)

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		cfg     Config
		wantErr bool
	}{
		{"connection string", Config{ConnectionString: "Endpoint=sb://x/;SharedAccessKeyName=k;SharedAccessKey=v"}, false},
		{"namespace without provisioning", Config{Namespace: "ns.servicebus.windows.net", SkipProvisioning: true}, false},
		{"emulator", Config{ConnectionString: "Endpoint=sb://localhost;UseDevelopmentEmulator=true", AdminEndpoint: "http://localhost:5300"}, false},
		{"admin endpoint not a URL", Config{Namespace: "ns.servicebus.windows.net", AdminEndpoint: "localhost"}, true},
		{"neither", Config{}, true},
		{"both", Config{Namespace: "ns.servicebus.windows.net", ConnectionString: "Endpoint=sb://x/"}, true},
		{"namespace as URL", Config{Namespace: "sb://ns.servicebus.windows.net/"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if err := tc.cfg.Validate(); (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %v", err, tc.wantErr)
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
