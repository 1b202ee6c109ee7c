// Package console is the gateway's web console: a few hand-written pages
// (embedded, no build step) at /ui/ that call the gateway's own REST API
// from the browser, and the sign-in that makes that safe. `lucius ui` asks
// ConsoleService for a one-time ticket with the caller's token; /ui/login
// trades the ticket for an HttpOnly, SameSite=Strict session cookie that
// authenticates REST calls as the same principal (the guard resolves it
// through Store), so roles and tenant scoping are exactly the API's. A
// change sent with the cookie must carry the session's CSRF token in
// X-CSRF-Token; bearer-token calls are untouched. With OIDC configured,
// browsers may also sign in at the identity provider (authorization code
// with PKCE); its access token's principal opens the session.
package console

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/lucius-platform/lucius/base/auth"
	"github.com/lucius-platform/lucius/base/server"
	"github.com/lucius-platform/lucius/base/telemetry"
	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
)

// Config configures the console. Zero values take the defaults noted.
type Config struct {
	// URL is where browsers reach this gateway's HTTP listener, e.g.
	// https://lucius.example.com (default: http:// and the listener's address).
	URL string
	// TicketTTL bounds how long a login ticket may wait to be used (60s).
	TicketTTL time.Duration
	// SessionTTL is how long a session lasts (8h). A session keeps the
	// principal it was opened for until it ends or the user signs out.
	SessionTTL time.Duration
	// OIDC, when set, offers sign-in at the identity provider besides
	// lucius ui's tickets (URL is then required).
	OIDC *OIDC
}

func (c *Config) defaults() {
	if c.TicketTTL == 0 {
		c.TicketTTL = 60 * time.Second
	}
	if c.SessionTTL == 0 {
		c.SessionTTL = 8 * time.Hour
	}
}

// Validate reports invalid settings.
func (c Config) Validate() error {
	var errs []error
	if c.URL != "" {
		u, err := url.Parse(c.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") {
			errs = append(errs, fmt.Errorf("console URL %q must be http(s)://host[:port]", c.URL))
		}
	}
	if c.TicketTTL < 0 || c.TicketTTL > 10*time.Minute {
		errs = append(errs, errors.New("console ticket TTL must be between 0 and 10m"))
	}
	if c.SessionTTL < 0 {
		errs = append(errs, errors.New("console session TTL must not be negative"))
	}
	if c.OIDC != nil {
		errs = append(errs, c.OIDC.validate(c.URL))
	}
	return errors.Join(errs...)
}

// Console serves ConsoleService and the /ui/ pages.
type Console struct {
	luciusv1.UnimplementedConsoleServiceServer
	cfg      Config
	store    *Store
	authn    *auth.Authenticator
	idp      provider
	httpAddr string
	log      *slog.Logger
}

var _ luciusv1.ConsoleServiceServer = (*Console)(nil)

// New returns the console of a gateway whose HTTP listener is httpAddr;
// authn checks the access tokens of OIDC sign-ins (the API's own trust).
func New(cfg Config, store *Store, authn *auth.Authenticator, httpAddr string, log *slog.Logger) (*Console, error) {
	cfg.defaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Console{cfg: cfg, store: store, authn: authn, httpAddr: httpAddr, log: log}, nil
}

// CreateConsoleTicket mints a login ticket for the caller.
func (c *Console) CreateConsoleTicket(ctx context.Context, req *luciusv1.CreateConsoleTicketRequest) (*luciusv1.CreateConsoleTicketResponse, error) {
	p := auth.FromContext(ctx)
	if p == nil {
		return nil, auth.Unauthenticated(auth.ErrNoCredentials)
	}
	if p.Session {
		// A stolen cookie must not become a ticket that outlives it.
		return nil, server.Error(codes.PermissionDenied, luciusv1.ErrorReason_ERROR_REASON_SESSION_NOT_ALLOWED,
			"a console session cannot mint login tickets: use the principal's own token").Err()
	}
	ticket, expires, err := c.store.CreateTicket(ctx, p, landing(req.GetJobId()), c.cfg.TicketTTL)
	if err != nil {
		c.log.ErrorContext(ctx, "console: mint ticket", telemetry.Err(err))
		return nil, server.Error(codes.Internal, luciusv1.ErrorReason_ERROR_REASON_INTERNAL, "the ticket could not be stored").Err()
	}
	return &luciusv1.CreateConsoleTicketResponse{Ticket: ticket, ExpireTime: timestamppb.New(expires),
		LoginUrl: c.baseURL(ctx) + "/ui/login?ticket=" + url.QueryEscape(ticket)}, nil
}

// landing is the page a ticket leads to: chosen here, never by the login
// URL, so a ticket cannot redirect anywhere else.
func landing(jobID string) string {
	if jobID != "" {
		return "/ui/jobs/" + jobID
	}
	return "/ui/jobs"
}

// baseURL is the configured console URL, else the HTTP listener's address;
// when that listens on every interface, the host the caller dialled.
func (c *Console) baseURL(ctx context.Context) string {
	if c.cfg.URL != "" {
		return strings.TrimSuffix(c.cfg.URL, "/")
	}
	host, port, err := net.SplitHostPort(c.httpAddr)
	if err != nil {
		return "http://" + c.httpAddr
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
		if a := metadata.ValueFromIncomingContext(ctx, ":authority"); len(a) == 1 {
			if h, _, err := net.SplitHostPort(a[0]); err == nil && h != "" {
				host = h
			}
		}
	}
	return "http://" + net.JoinHostPort(host, port)
}
