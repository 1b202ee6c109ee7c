package console

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/lucius-platform/lucius/base/auth"
	"github.com/lucius-platform/lucius/base/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m, Migrations) }

// clock is a settable time for a store.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func newStore(t *testing.T) (*Store, *clock) {
	t.Helper()
	c := &clock{t: time.Now()}
	s := NewStore(pgtest.NewPool(t))
	s.now = c.now
	return s, c
}

var partner = &auth.Principal{Subject: "alice", Issuer: "lucius-local", Roles: []auth.Role{auth.RolePartner}, Tenants: []string{"acme"}}

func TestTicketOpensOneSessionOfItsPrincipalWithinItsLifetime(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		wait time.Duration // between minting and redeeming
		ok   bool
	}{
		{"at once", 0, true},
		{"just before it expires", 59 * time.Second, true},
		{"when it expires", 60 * time.Second, false},
		{"long after", time.Hour, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			s, c := newStore(t)
			ticket, expires, err := s.CreateTicket(ctx, partner, "/ui/jobs/x", 60*time.Second)
			if err != nil || !expires.Equal(c.now().Add(60*time.Second)) {
				t.Fatalf("create: %v, expires %v", err, expires)
			}
			c.advance(tt.wait)
			session, landing, _, err := s.Redeem(ctx, ticket, time.Hour)
			if !tt.ok {
				if !errors.Is(err, ErrTicketInvalid) {
					t.Fatalf("redeemed an expired ticket: %v", err)
				}
				return
			}
			if err != nil || landing != "/ui/jobs/x" {
				t.Fatalf("redeem: %v (landing %q)", err, landing)
			}
			p, err := s.Session(ctx, session)
			if err != nil || p.String() != partner.String() || !slices.Equal(p.Tenants, partner.Tenants) ||
				!slices.Equal(p.Roles, partner.Roles) || p.Session {
				t.Fatalf("session principal %+v, %v", p, err)
			}
			if _, _, _, err := s.Redeem(ctx, ticket, time.Hour); !errors.Is(err, ErrTicketInvalid) {
				t.Fatalf("a used ticket redeemed again: %v", err)
			}
		})
	}
}

func TestTicketRacedByTwoLoginsOpensOneSession(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := newStore(t)
	ticket, _, err := s.CreateTicket(ctx, partner, "/ui/jobs", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Go(func() { _, _, _, errs[i] = s.Redeem(ctx, ticket, time.Hour) })
	}
	wg.Wait()
	won := 0
	for _, err := range errs {
		switch {
		case err == nil:
			won++
		case !errors.Is(err, ErrTicketInvalid):
			t.Fatal(err)
		}
	}
	if won != 1 {
		t.Fatalf("%d logins succeeded with one ticket, want 1", won)
	}
}

func TestSessionEndsAtItsExpiryOrLogout(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, c := newStore(t)
	open := func() string {
		t.Helper()
		ticket, _, err := s.CreateTicket(ctx, partner, "/ui/jobs", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		session, _, _, err := s.Redeem(ctx, ticket, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return session
	}
	a, b := open(), open()
	if err := s.EndSession(ctx, a); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Session(ctx, a); !errors.Is(err, ErrSessionInvalid) {
		t.Fatalf("a logged-out session still works: %v", err)
	}
	if _, err := s.Session(ctx, b); err != nil {
		t.Fatalf("logging one session out ended another: %v", err)
	}
	c.advance(time.Hour)
	if _, err := s.Session(ctx, b); !errors.Is(err, ErrSessionInvalid) {
		t.Fatalf("an expired session still works: %v", err)
	}
	for _, id := range []string{"", "lcs_nope", newSecret(sessionPrefix), newSecret(ticketPrefix)} {
		if _, err := s.Session(ctx, id); !errors.Is(err, ErrSessionInvalid) {
			t.Fatalf("session %q: %v", id, err)
		}
	}
	// Minting purges what expired.
	if _, _, err := s.CreateTicket(ctx, partner, "/ui/jobs", time.Minute); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM console_sessions`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d expired sessions kept (%v)", n, err)
	}
}
