package mcpauth_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"ticketrelay/front/mcpauth"
	"ticketrelay/metrics"
	"ticketrelay/testkit/testwait"
)

// TestJWKSUnreachable: with the issuer down, keys already held still
// verify tokens (past their TTL too); without any key held every JWT is
// refused as no_key, the failed fetches are counted and the key gauge
// stays 0 (the alert's signal), and fetches stay bounded.
func TestJWKSUnreachable(t *testing.T) {
	t.Run("keys held", func(t *testing.T) {
		f := newFixture(t, func(c *mcpauth.Config) { c.KeysTTL = time.Minute; c.MinRefreshInterval = time.Minute })
		if err := f.v.Refresh(t.Context()); err != nil {
			t.Fatal(err)
		}
		f.is.SetDown(true)
		f.clk.Add(2 * time.Minute)
		token := f.is.Mint(f.claims("user-1"))
		if _, err := f.v.Validate(t.Context(), token); err != nil {
			t.Fatalf("a held key while the JWKS is down: %v", err)
		}
		failed := func() float64 { return testutil.ToFloat64(f.m.JWKSRefreshes.WithLabelValues(metrics.RefreshFailed)) }
		testwait.For(t, 10*time.Second, "the refresh behind the request to fail", func() bool { return failed() == 1 })
		if _, err := f.v.Validate(t.Context(), token); err != nil {
			t.Fatalf("after the failed refresh: %v", err)
		}
		if got := testutil.ToFloat64(f.m.JWKSKeys); got != 1 {
			t.Errorf("keys gauge %v after a failed refresh, want the held key", got)
		}
	})
	t.Run("no key held", func(t *testing.T) {
		f := newFixture(t, func(c *mcpauth.Config) { c.MinRefreshInterval = time.Minute })
		f.is.SetDown(true)
		if err := f.v.Refresh(t.Context()); err == nil {
			t.Fatal("Refresh against a down issuer succeeded")
		}
		token := f.is.Mint(f.claims("user-1"))
		for range 20 {
			f.refused(t, token, mcpauth.OutcomeNoKey)
		}
		if n := f.is.JWKSFetches(); n != 0 {
			// The metadata endpoint is down too: the JWKS URL is unknown.
			t.Errorf("%d JWKS fetches", n)
		}
		if got := testutil.ToFloat64(f.m.JWKSRefreshes.WithLabelValues(metrics.RefreshFailed)); got != 1 {
			t.Errorf("%v failed refreshes within one interval, want 1", got)
		}
		if got := testutil.ToFloat64(f.m.JWKSKeys); got != 0 {
			t.Errorf("keys gauge %v", got)
		}
		// The issuer is back: the next fetch, one interval later, serves.
		f.is.SetDown(false)
		f.clk.Add(time.Minute)
		if _, err := f.v.Validate(t.Context(), token); err != nil {
			t.Fatalf("after the issuer came back: %v", err)
		}
	})
}

// TestIntrospection: opaque tokens are validated at the issuer's RFC 7662
// endpoint (found in its metadata), with the audience, issuer and expiry
// checked as for a JWT; active answers are reused for a while, never
// past exp; an endpoint that fails refuses the token.
func TestIntrospection(t *testing.T) {
	f := newFixture(t, func(c *mcpauth.Config) {
		c.Introspection = &mcpauth.Introspection{ClientID: "ticketrelay", ClientSecret: "s3cret", CacheTTL: time.Minute}
	})
	now := f.clk.Now()
	answers := map[string]map[string]any{
		"opaque-good": {"active": true, "sub": "user-9", "aud": []string{resource}, "iss": f.is.URL(),
			"exp": now.Add(10 * time.Minute).Unix(), "scope": "tickets", "client_id": "cli", "ext": map[string]any{"groups": []string{"ops"}}},
		"opaque-revoked":   {"active": false},
		"opaque-other-aud": {"active": true, "sub": "user-9", "aud": "https://other.example", "exp": now.Add(time.Hour).Unix()},
		"opaque-other-iss": {"active": true, "sub": "user-9", "aud": resource, "iss": "https://evil.example", "exp": now.Add(time.Hour).Unix()},
		"opaque-expired":   {"active": true, "sub": "user-9", "aud": resource, "exp": now.Add(-time.Hour).Unix()},
	}
	f.is.Introspect(func(form map[string][]string) (int, any) {
		tok := url.Values(form).Get("token")
		if tok == "opaque-error" {
			return http.StatusInternalServerError, map[string]any{"error": "server_error"}
		}
		if a, ok := answers[tok]; ok {
			return http.StatusOK, a
		}
		return http.StatusOK, map[string]any{"active": false}
	})
	p, err := f.v.Validate(t.Context(), "opaque-good")
	if err != nil || p.ID() != (mcpauth.Principal{Issuer: f.is.URL(), Subject: "user-9"}).ID() ||
		strings.Join(p.Scopes, " ") != "tickets" || strings.Join(p.Groups, ",") != "ops" || p.ClientID != "cli" {
		t.Fatalf("introspected: %+v, %v", p, err)
	}
	if _, err := f.v.Validate(t.Context(), "opaque-good"); err != nil || f.is.Intros.Load() != 1 {
		t.Errorf("second use: %v, %d introspections, want 1 (cached)", err, f.is.Intros.Load())
	}
	f.clk.Add(time.Minute)
	if _, err := f.v.Validate(t.Context(), "opaque-good"); err != nil || f.is.Intros.Load() != 2 {
		t.Errorf("after the cache TTL: %v, %d introspections, want 2", err, f.is.Intros.Load())
	}
	for tok, outcome := range map[string]string{
		"opaque-revoked": mcpauth.OutcomeInactive, "opaque-other-aud": mcpauth.OutcomeWrongAudience,
		"opaque-other-iss": mcpauth.OutcomeWrongIssuer, "opaque-expired": mcpauth.OutcomeExpired,
		"opaque-error": mcpauth.OutcomeIntrospectionFailed,
	} {
		t.Run(tok, func(t *testing.T) { f.refused(t, tok, outcome) })
	}
	// JWTs are still validated locally.
	if _, err := f.v.Validate(t.Context(), f.is.Mint(f.claims("user-1"))); err != nil {
		t.Errorf("a JWT beside introspection: %v", err)
	}
}

// TestConfigRefused: a configuration that would accept forgeable tokens,
// or names no resource, is refused.
func TestConfigRefused(t *testing.T) {
	for name, cfg := range map[string]mcpauth.Config{
		"HS256":          {Issuer: "https://a.example", Audience: resource, Algorithms: []string{"HS256"}},
		"none":           {Issuer: "https://a.example", Audience: resource, Algorithms: []string{"none"}},
		"no algorithm":   {Issuer: "https://a.example", Audience: resource, Algorithms: []string{}},
		"no issuer":      {Audience: resource},
		"no audience":    {Issuer: "https://a.example"},
		"relative JWKS":  {Issuer: "https://a.example", Audience: resource, JWKSURL: "/jwks"},
		"introspection":  {Issuer: "https://a.example", Audience: resource, Introspection: &mcpauth.Introspection{}},
		"issuer not URL": {Issuer: "accounts.example", Audience: resource},
	} {
		if _, err := mcpauth.New(cfg); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
