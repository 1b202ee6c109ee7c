package egress

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestCheckAddrRefusesInternalAddresses(t *testing.T) {
	t.Parallel()
	tests := []struct {
		addr    string
		allowed bool
	}{
		{"93.184.215.14", true},
		{"2606:2800:21f:cb07:6820:80da:af6b:8b2c", true},
		{"8.8.8.8", true},
		{"127.0.0.1", false},
		{"127.1.2.3", false},
		{"::1", false},
		{"::ffff:127.0.0.1", false}, // IPv4-mapped
		{"::127.0.0.1", false},      // IPv4-compatible
		{"0.0.0.0", false},
		{"::", false},
		{"10.1.2.3", false},
		{"172.16.0.1", false},
		{"172.31.255.255", false},
		{"172.32.0.1", true},
		{"192.168.1.1", false},
		{"169.254.169.254", false}, // AWS, GCP, Azure instance metadata
		{"::ffff:169.254.169.254", false},
		{"fd00:ec2::254", false}, // AWS IPv6 metadata
		{"168.63.129.16", false}, // Azure wire server
		{"fe80::1", false},
		{"fe80::1%eth0", false},
		{"fc00::1", false},
		{"100.64.0.1", false}, // CGNAT
		{"100.128.0.1", true},
		{"224.0.0.1", false},
		{"ff02::1", false},
		{"255.255.255.255", false},
		{"64:ff9b::a9fe:a9fe", false}, // NAT64 of 169.254.169.254
		{"2002:7f00:1::", false},      // 6to4 of 127.0.0.1
	}
	for _, tt := range tests {
		err := Policy{}.CheckAddr(netip.MustParseAddr(tt.addr))
		if tt.allowed != (err == nil) {
			t.Errorf("CheckAddr(%s) = %v, want allowed %v", tt.addr, err, tt.allowed)
		}
		if err != nil && !errors.Is(err, ErrForbidden) {
			t.Errorf("CheckAddr(%s) = %v, not ErrForbidden", tt.addr, err)
		}
	}
}

func TestAllowlistOpensOnlyItsRanges(t *testing.T) {
	t.Parallel()
	allow, err := ParseAllow("127.0.0.1, 10.20.0.0/16,::1")
	if err != nil {
		t.Fatal(err)
	}
	p := Policy{Allow: allow}
	for addr, allowed := range map[string]bool{"127.0.0.1": true, "::ffff:127.0.0.1": true, "127.0.0.2": false,
		"10.20.3.4": true, "10.21.0.1": false, "::1": true, "169.254.169.254": false} {
		if err := p.CheckAddr(netip.MustParseAddr(addr)); allowed != (err == nil) {
			t.Errorf("allowlisted policy: CheckAddr(%s) = %v, want allowed %v", addr, err, allowed)
		}
	}
}

func TestParseAllow(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in, want, wantErr string
	}{
		{"", "", ""},
		{"127.0.0.0/8", "127.0.0.0/8", ""},
		{"10.1.2.3/8, ::1", "10.0.0.0/8 ::1/128", ""},
		{"::ffff:10.0.0.1", "10.0.0.1/32", ""},
		{"localhost", "", "neither a CIDR range nor an IP address"},
		{"10.0.0.0/33", "", "neither"},
	}
	for _, tt := range tests {
		got, err := ParseAllow(tt.in)
		var s []string
		for _, p := range got {
			s = append(s, p.String())
		}
		switch {
		case tt.wantErr != "":
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("ParseAllow(%q) = %v, %v; want error %q", tt.in, got, err, tt.wantErr)
			}
		case err != nil || strings.Join(s, " ") != tt.want:
			t.Errorf("ParseAllow(%q) = %v, %v; want %s", tt.in, s, err, tt.want)
		}
	}
}

func TestCheckURLRefusesLiteralInternalHosts(t *testing.T) {
	t.Parallel()
	tests := []struct {
		url     string
		allowed bool
	}{
		{"https://hooks.example.com/lucius", true},
		{"http://203.0.113.7:8080/x", true},
		{"https://127.0.0.1/x", false},
		{"https://[::1]:8443/x", false},
		{"http://169.254.169.254/latest/meta-data/", false},
		{"http://[::ffff:169.254.169.254]/", false},
		{"http://10.0.0.5/", false},
		{"http://localhost:8080/", false},
		{"http://LOCALHOST./", false},
		{"http://api.localhost/", false},
		{"http://0.0.0.0:80/", false},
		{"ftp://hooks.example.com/x", false},
		{"https://user:pw@hooks.example.com/x", false},
		{"https:///x", false},
	}
	for _, tt := range tests {
		u, err := url.Parse(tt.url)
		if err != nil {
			t.Fatal(err)
		}
		if err := (Policy{}).CheckURL(u); tt.allowed != (err == nil) {
			t.Errorf("CheckURL(%s) = %v, want allowed %v", tt.url, err, tt.allowed)
		}
	}
	// localhost may resolve to either loopback: allowed only when both are.
	ipv4 := Policy{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}
	if err := ipv4.CheckURL(&url.URL{Scheme: "http", Host: "localhost:8080"}); err == nil {
		t.Error("only 127.0.0.0/8 allowlisted: localhost allowed, though it may resolve to ::1")
	}
	loopback := Policy{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}}
	if err := loopback.CheckURL(&url.URL{Scheme: "http", Host: "localhost:8080"}); err != nil {
		t.Errorf("both loopbacks allowlisted: localhost refused: %v", err)
	}
}

// The client checks the address it connects to, not the URL: a request to
// a loopback server fails in the dialer unless loopback is allowlisted.
func TestClientRefusesForbiddenAddressesAtConnect(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	defer srv.Close()

	_, err := Policy{}.Client(5*time.Second, nil).Get(srv.URL)
	if !errors.Is(err, ErrForbidden) {
		t.Fatalf("GET %s with the default policy: %v, want ErrForbidden", srv.URL, err)
	}
	allowed := Policy{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}}
	resp, err := allowed.Client(5*time.Second, nil).Get(srv.URL)
	if err != nil {
		t.Fatalf("GET %s with loopback allowlisted: %v", srv.URL, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Errorf("status %d", resp.StatusCode)
	}
}

func TestClientRechecksRedirects(t *testing.T) {
	t.Parallel()
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) }))
	defer target.Close()
	var hops atomic.Int32
	redirector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/metadata":
			http.Redirect(w, r, "http://169.254.169.254/latest/meta-data/", http.StatusFound)
		case "/loop":
			hops.Add(1)
			http.Redirect(w, r, "/loop", http.StatusFound)
		default:
			http.Redirect(w, r, target.URL, http.StatusFound)
		}
	}))
	defer redirector.Close()
	client := Policy{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}}.Client(5*time.Second, nil)

	if _, err := client.Get(redirector.URL + "/metadata"); err == nil || !errors.Is(err, ErrForbidden) {
		t.Errorf("redirect to the metadata address: %v, want ErrForbidden", err)
	}
	if _, err := client.Get(redirector.URL + "/loop"); err == nil || !strings.Contains(err.Error(), "redirects") {
		t.Errorf("redirect loop: %v, want a stop after %d redirects", err, MaxRedirects)
	}
	if n := hops.Load(); n != MaxRedirects+1 {
		t.Errorf("followed %d redirects, want %d", n-1, MaxRedirects)
	}
	resp, err := client.Get(redirector.URL + "/ok")
	if err != nil {
		t.Fatalf("redirect to an allowed address: %v", err)
	}
	resp.Body.Close()
}

// Whatever the host, CheckHost does not panic, and a literal address it
// allows is in no denied range.
func FuzzCheckHost(f *testing.F) {
	for _, seed := range []string{"127.0.0.1", "[::1]", "::ffff:a9fe:a9fe", "localhost", "x.localhost.", "example.com",
		"fe80::1%25eth0", "0", "0x7f.1", "[fd00:ec2::254]", ""} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, host string) {
		if (Policy{}).CheckHost(host) != nil {
			return
		}
		a, err := netip.ParseAddr(strings.TrimSuffix(strings.ToLower(strings.Trim(host, "[]")), "."))
		if err != nil {
			return
		}
		a = a.Unmap().WithZone("")
		for _, d := range Denied {
			if d.Contains(a) {
				t.Fatalf("%q allowed in denied range %s", host, d)
			}
		}
	})
}
