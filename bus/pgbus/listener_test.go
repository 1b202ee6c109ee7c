package pgbus

import (
	"regexp"
	"testing"
)

func TestChannelNameIsAValidDistinctIdentifier(t *testing.T) {
	t.Parallel()
	ident := regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)
	seen := map[string]string{}
	for _, path := range []string{
		"q",
		"q/$deadletterqueue",
		"orchestrator-events/subscriptions/orchestrator",
		"orchestrator-events/subscriptions/orchestrator/$deadletterqueue",
		"global-default-p15/subscriptions/worker",
		string(make([]byte, 400)),
	} {
		ch := channelName(path)
		if !ident.MatchString(ch) {
			t.Errorf("channel %q of %q is not a lower-case identifier of at most 63 bytes", ch, path)
		}
		if other, ok := seen[ch]; ok {
			t.Errorf("paths %q and %q share channel %q", path, other, ch)
		}
		seen[ch] = path
		if channelName(path) != ch {
			t.Errorf("channel of %q is not stable", path)
		}
	}
}

func TestIsUUID(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want bool
	}{
		{"2f1b6c1e-8a43-4a5e-9a7e-0c4b1f2d3e4f", true},
		{"2F1B6C1E-8A43-4A5E-9A7E-0C4B1F2D3E4F", true},
		{"", false},
		{"2f1b6c1e8a434a5e9a7e0c4b1f2d3e4f", false},
		{"2f1b6c1e-8a43-4a5e-9a7e-0c4b1f2d3e4g", false},
		{"2f1b6c1e-8a43-4a5e-9a7e0-c4b1f2d3e4f", false},
	} {
		if got := isUUID(tc.in); got != tc.want {
			t.Errorf("isUUID(%q) = %v, want %v", tc.in, got, tc.want)
		}
	}
}
