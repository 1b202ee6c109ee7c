// Package egress is Lucius's one way out to addresses partners name
// (completion webhooks, https:// refs): a dialer that checks the address it
// actually connects to, after DNS resolution, and refuses loopback,
// link-local, private, unique-local, carrier-grade NAT, multicast,
// unspecified and cloud metadata addresses unless the operator allowlists
// them (LUCIUS_EGRESS_ALLOW). Checking at connect time, not when a URL is
// read, closes DNS rebinding: a name that resolved to a public address at
// submit and to 169.254.169.254 at delivery is refused at delivery. An HTTP
// client built here dials only through that check, ignores proxy variables
// (a proxy would connect on its behalf) and re-checks every redirect.
package egress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
	"time"
)

// ErrForbidden marks an address the policy refuses; match it with errors.Is.
var ErrForbidden = errors.New("address forbidden by the egress policy")

// Policy decides which addresses outbound calls may reach. The zero Policy
// refuses every address in Denied.
type Policy struct {
	// Allow lists ranges reachable although Denied covers them, e.g.
	// 10.20.0.0/16 for a partner's receiver on a private network, or
	// 127.0.0.0/8 for tests on one machine.
	Allow []netip.Prefix
}

// Denied are the ranges no outbound call reaches unless allowlisted.
var Denied = func() []netip.Prefix {
	var out []netip.Prefix
	for _, s := range []string{
		"0.0.0.0/8",        // "this network", 0.0.0.0 reaches the local host
		"10.0.0.0/8",       // private
		"100.64.0.0/10",    // carrier-grade NAT
		"127.0.0.0/8",      // loopback
		"169.254.0.0/16",   // link-local, cloud metadata (169.254.169.254)
		"172.16.0.0/12",    // private
		"192.0.0.0/24",     // IETF protocol assignments
		"192.168.0.0/16",   // private
		"198.18.0.0/15",    // benchmarking
		"168.63.129.16/32", // Azure wire server
		"224.0.0.0/4",      // multicast
		"240.0.0.0/4",      // reserved, broadcast
		"::/128",           // unspecified
		"::1/128",          // loopback
		"fc00::/7",         // unique-local, AWS metadata (fd00:ec2::254)
		"fe80::/10",        // link-local
		"ff00::/8",         // multicast
		"::/96",            // IPv4-compatible (deprecated): ::127.0.0.1
		"::ffff:0:0:0/96",  // IPv4-translated
		"64:ff9b::/96",     // NAT64: embeds an IPv4 address a gateway reaches
		"64:ff9b:1::/48",   // local-use NAT64
		"2002::/16",        // 6to4: embeds an IPv4 address
		"2001::/32",        // Teredo: embeds an IPv4 address
		"100::/64",         // discard-only
		"2001:db8::/32",    // documentation
		"fec0::/10",        // deprecated site-local
	} {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}()

// ParseAllow reads LUCIUS_EGRESS_ALLOW: a comma-separated list of CIDR
// ranges or single addresses ("127.0.0.1" reads as 127.0.0.1/32).
func ParseAllow(list string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	var errs []error
	for _, s := range strings.Split(list, ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		if p, err := netip.ParsePrefix(s); err == nil {
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(s)
		if err != nil {
			errs = append(errs, fmt.Errorf("%q is neither a CIDR range nor an IP address", s))
			continue
		}
		a = a.Unmap()
		out = append(out, netip.PrefixFrom(a, a.BitLen()))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("LUCIUS_EGRESS_ALLOW: %w", err)
	}
	return out, nil
}

// CheckAddr returns nil when an outbound call may reach a, or an error
// wrapping ErrForbidden. IPv4-mapped IPv6 addresses are judged as the IPv4
// address they carry.
func (p Policy) CheckAddr(a netip.Addr) error {
	a = a.Unmap().WithZone("")
	if !a.IsValid() {
		return fmt.Errorf("%w: invalid address", ErrForbidden)
	}
	for _, allowed := range p.Allow {
		if allowed.Contains(a) {
			return nil
		}
	}
	for _, d := range Denied {
		if d.Contains(a) {
			return fmt.Errorf("%w: %s is in %s (allowlist it with LUCIUS_EGRESS_ALLOW)", ErrForbidden, a, d)
		}
	}
	return nil
}

// CheckHost refuses a URL host that is a literal denied address or a name
// that always means this machine ("localhost", "*.localhost"); any other
// name is judged when it is dialed. A literal host lets the gateway refuse a
// callback_url at submit rather than at delivery.
func (p Policy) CheckHost(host string) error {
	host = strings.TrimSuffix(strings.ToLower(strings.Trim(host, "[]")), ".")
	if a, err := netip.ParseAddr(host); err == nil {
		return p.CheckAddr(a)
	}
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		// Either loopback may answer the name: both must be allowed.
		return errors.Join(p.CheckAddr(netip.MustParseAddr("127.0.0.1")), p.CheckAddr(netip.MustParseAddr("::1")))
	}
	return nil
}

// CheckURL refuses a URL an outbound HTTP call must not be sent to: a scheme
// other than http or https, credentials in it, no host, or a host CheckHost
// refuses.
func (p Policy) CheckURL(u *url.URL) error {
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("scheme %q: want http or https", u.Scheme)
	}
	if u.User != nil {
		return errors.New("must not carry credentials")
	}
	if u.Hostname() == "" {
		return errors.New("has no host")
	}
	return p.CheckHost(u.Hostname())
}

// control is a net.Dialer Control hook: it runs after resolution, just before
// connect, with the address the socket is about to reach.
func (p Policy) control(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("%w: unparsable address %q", ErrForbidden, address)
	}
	return p.CheckAddr(ap.Addr())
}

// Dialer returns a dialer that refuses every connection the policy forbids,
// whatever name led to it.
func (p Policy) Dialer(timeout time.Duration) *net.Dialer {
	return &net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second, Control: p.control}
}

// MaxRedirects is how many redirects a client built by Client follows.
const MaxRedirects = 3

// Client returns an HTTP client whose every connection goes through the
// policy's dialer, with no proxy, following at most MaxRedirects redirects,
// each re-checked with CheckURL (and its connection by the dialer). wrap,
// when not nil, wraps the transport (e.g. with tracing).
func (p Policy) Client(timeout time.Duration, wrap func(http.RoundTripper) http.RoundTripper) *http.Client {
	dialer := p.Dialer(10 * time.Second)
	transport := &http.Transport{
		Proxy: nil,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return dialer.DialContext(ctx, network, addr)
		},
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          100,
		MaxIdleConnsPerHost:   8,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
		ResponseHeaderTimeout: timeout,
	}
	var rt http.RoundTripper = transport
	if wrap != nil {
		rt = wrap(transport)
	}
	return &http.Client{Timeout: timeout, Transport: rt,
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if len(via) > MaxRedirects {
				return fmt.Errorf("stopped after %d redirects", MaxRedirects)
			}
			if err := p.CheckURL(req.URL); err != nil {
				return fmt.Errorf("redirect to %s: %w", req.URL.Redacted(), err)
			}
			return nil
		}}
}
