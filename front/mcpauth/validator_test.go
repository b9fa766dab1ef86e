package mcpauth_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"ticketrelay/testkit/testclock"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"ticketrelay/front/mcpauth"
	"ticketrelay/front/mcpauth/mcpauthtest"
	"ticketrelay/metrics"
	"ticketrelay/testkit/testwait"
)

const resource = "https://tickets.example/mcp"

type fixture struct {
	is  *mcpauthtest.Issuer
	clk *testclock.Clock
	m   *metrics.OAuth
	v   *mcpauth.Validator
}

func newFixture(t *testing.T, edit func(*mcpauth.Config)) *fixture {
	t.Helper()
	f := &fixture{is: mcpauthtest.NewIssuer(t), clk: testclock.New(time.Now().Truncate(time.Second))}
	f.m = metrics.NewOAuth(prometheus.NewRegistry(), mcpauth.Outcomes)
	cfg := mcpauth.Config{Issuer: f.is.URL(), Audience: resource, Now: f.clk.Now, Metrics: f.m}
	if edit != nil {
		edit(&cfg)
	}
	v, err := mcpauth.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	f.v = v
	return f
}

func (f *fixture) claims(sub string) map[string]any { return f.is.Claims(sub, resource, f.clk.Now()) }

// refused validates token, expects outcome, and checks that it was counted
// once and that the error says nothing of the token.
func (f *fixture) refused(t *testing.T, token, outcome string) {
	t.Helper()
	before := testutil.ToFloat64(f.m.Validations.WithLabelValues(outcome))
	p, err := f.v.Validate(t.Context(), token)
	var e *mcpauth.Error
	if !errors.As(err, &e) || e.Outcome != outcome {
		t.Fatalf("Validate: %+v, %v; want outcome %s", p, err, outcome)
	}
	if !errors.Is(err, auth.ErrInvalidToken) {
		t.Errorf("%v does not wrap auth.ErrInvalidToken", err)
	}
	if len(token) > 20 && strings.Contains(err.Error(), token[len(token)-20:]) {
		t.Errorf("the error shows the token: %v", err)
	}
	if got := testutil.ToFloat64(f.m.Validations.WithLabelValues(outcome)) - before; got != 1 {
		t.Errorf("outcome %s counted %v times", outcome, got)
	}
}

func TestValidToken(t *testing.T) {
	f := newFixture(t, func(c *mcpauth.Config) { c.GroupsClaim = "https://tickets.example/groups" })
	c := f.claims("user-1")
	c["scope"] = "tickets openid"
	c["https://tickets.example/groups"] = []string{"ops", "sre"}
	c["name"], c["email"], c["aud"] = "Ada", "ada@example.com", resource+"/"
	p, err := f.v.Validate(t.Context(), f.is.Mint(c))
	if err != nil {
		t.Fatal(err)
	}
	want := mcpauth.Principal{Issuer: f.is.URL(), Subject: "user-1", Scopes: []string{"tickets", "openid"},
		Groups: []string{"ops", "sre"}, Name: "Ada", Email: "ada@example.com", ClientID: "test-client",
		Expiry: f.clk.Now().Add(10 * time.Minute)}
	if got, _ := json.Marshal(p); string(got) != string(must(json.Marshal(want))) {
		t.Errorf("principal %s, want %s", got, must(json.Marshal(want)))
	}
	if got := testutil.ToFloat64(f.m.Validations.WithLabelValues(mcpauth.OutcomeOK)); got != 1 {
		t.Errorf("ok counted %v times", got)
	}
	if got := testutil.ToFloat64(f.m.JWKSKeys); got != 1 {
		t.Errorf("jwks keys gauge %v", got)
	}
	// Entra's scp (a string), Okta's (a list), Hydra's ext, azp.
	c = f.claims("user-2")
	delete(c, "scope")
	delete(c, "client_id")
	c["scp"], c["azp"], c["ext"] = []string{"a", "b"}, "cli", map[string]any{"email": "u2@example.com"}
	p, err = f.v.Validate(t.Context(), f.is.Mint(c))
	if err != nil || strings.Join(p.Scopes, " ") != "a b" || p.ClientID != "cli" || p.Email != "u2@example.com" {
		t.Errorf("scp list, azp, ext: %+v, %v", p, err)
	}
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}

// TestRefusedTokens: every kind of bad token is refused with its outcome,
// counted once.
func TestRefusedTokens(t *testing.T) {
	f := newFixture(t, nil)
	signer := f.is.Signer()
	forger := mcpauthtest.NewKey(t, signer.ID, jose.RS256) // same kid, another key
	now := f.clk.Now()
	with := func(edit func(map[string]any)) string {
		c := f.claims("user-1")
		edit(c)
		return f.is.Mint(c)
	}
	pubDER, err := x509.MarshalPKIXPublicKey(signer.Key.Public())
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, token, outcome string
	}{
		{"expired", with(func(c map[string]any) { c["exp"] = now.Add(-time.Minute).Unix() }), mcpauth.OutcomeExpired},
		{"not yet valid", with(func(c map[string]any) { c["nbf"] = now.Add(time.Minute).Unix() }), mcpauth.OutcomeNotYetValid},
		{"issued in the future", with(func(c map[string]any) { c["iat"] = now.Add(time.Hour).Unix() }), mcpauth.OutcomeNotYetValid},
		{"forged signature", mcpauthtest.MintWith(t, forger, f.claims("user-1")), mcpauth.OutcomeBadSignature},
		{"tampered payload", tamper(t, f.is.Mint(f.claims("user-1"))), mcpauth.OutcomeBadSignature},
		{"wrong issuer", with(func(c map[string]any) { c["iss"] = "https://evil.example" }), mcpauth.OutcomeWrongIssuer},
		{"wrong audience", with(func(c map[string]any) { c["aud"] = "https://other.example/mcp" }), mcpauth.OutcomeWrongAudience},
		{"no audience", with(func(c map[string]any) { delete(c, "aud") }), mcpauth.OutcomeWrongAudience},
		{"audience by prefix", with(func(c map[string]any) { c["aud"] = resource + "/x" }), mcpauth.OutcomeWrongAudience},
		{"alg none", unsigned(t, "none", f.claims("user-1"), nil, signer.ID), mcpauth.OutcomeBadAlgorithm},
		{"HS256 with the public key", unsigned(t, "HS256", f.claims("user-1"), pubDER, signer.ID), mcpauth.OutcomeBadAlgorithm},
		{"no exp", with(func(c map[string]any) { delete(c, "exp") }), mcpauth.OutcomeMalformed},
		{"no sub", with(func(c map[string]any) { delete(c, "sub") }), mcpauth.OutcomeMalformed},
		{"iss a number", with(func(c map[string]any) { c["iss"] = 7 }), mcpauth.OutcomeMalformed},
		{"not a JWT", "opaque-token-without-dots", mcpauth.OutcomeMalformed},
		{"garbage header", "e30K!.e30.e30", mcpauth.OutcomeMalformed},
		{"oversized token", with(func(c map[string]any) { c["pad"] = strings.Repeat("x", mcpauth.DefaultMaxTokenBytes) }), mcpauth.OutcomeTooLarge},
		{"oversized claim", with(func(c map[string]any) { c["sub"] = strings.Repeat("s", 2000) }), mcpauth.OutcomeTooLarge},
		{"too many groups", with(func(c map[string]any) { c["groups"] = make([]string, 300) }), mcpauth.OutcomeTooLarge},
		{"unknown key", mcpauthtest.MintWith(t, mcpauthtest.NewKey(t, "k-unknown", jose.RS256), f.claims("u")), mcpauth.OutcomeUnknownKey},
	} {
		t.Run(tc.name, func(t *testing.T) { f.refused(t, tc.token, tc.outcome) })
	}
}

// tamper changes the payload of a signed token, keeping its signature.
func tamper(t *testing.T, token string) string {
	parts := strings.Split(token, ".")
	b, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	var c map[string]any
	json.Unmarshal(b, &c)
	c["sub"] = "admin"
	parts[1] = base64.RawURLEncoding.EncodeToString(must(json.Marshal(c)))
	return strings.Join(parts, ".")
}

// unsigned builds a token by hand: alg none (empty signature), or HS256
// with secret as the HMAC key.
func unsigned(t *testing.T, alg string, claims map[string]any, secret []byte, kid string) string {
	t.Helper()
	enc := base64.RawURLEncoding
	head := enc.EncodeToString(must(json.Marshal(map[string]string{"alg": alg, "typ": "JWT", "kid": kid})))
	body := enc.EncodeToString(must(json.Marshal(claims)))
	if alg == "none" {
		return head + "." + body + "."
	}
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte(head + "." + body))
	return head + "." + body + "." + enc.EncodeToString(mac.Sum(nil))
}

// TestLeeway: exp and nbf are honoured within the leeway, not beyond.
func TestLeeway(t *testing.T) {
	f := newFixture(t, func(c *mcpauth.Config) { c.Leeway = 20 * time.Second })
	c := f.claims("user-1")
	c["exp"] = f.clk.Now().Add(-15 * time.Second).Unix()
	c["nbf"] = f.clk.Now().Add(15 * time.Second).Unix()
	token := f.is.Mint(c)
	if _, err := f.v.Validate(t.Context(), token); err != nil {
		t.Fatalf("within the leeway: %v", err)
	}
	f.clk.Add(10 * time.Second)
	f.refused(t, token, mcpauth.OutcomeExpired)
	if _, err := mcpauth.New(mcpauth.Config{Issuer: f.is.URL(), Audience: resource, Leeway: time.Hour}); err == nil {
		t.Error("a leeway of an hour was accepted")
	}
}

// TestKeyRotation: a token signed by a key published after the last fetch
// makes the validator fetch the JWKS again, at most once per
// MinRefreshInterval however many unknown key ids arrive; keys the issuer
// stopped publishing stop verifying once the keys are fetched again.
func TestKeyRotation(t *testing.T) {
	f := newFixture(t, func(c *mcpauth.Config) { c.MinRefreshInterval = time.Minute; c.KeysTTL = time.Hour })
	old := f.is.Signer()
	long := f.claims("user-1")
	long["exp"] = f.clk.Now().Add(24 * time.Hour).Unix() // outlives the test's clock
	oldToken := f.is.Mint(long)
	if _, err := f.v.Validate(t.Context(), oldToken); err != nil {
		t.Fatal(err)
	}
	if n := f.is.JWKSFetches(); n != 1 {
		t.Fatalf("%d JWKS fetches, want 1", n)
	}
	// A flood of made-up key ids: one fetch at most per interval.
	f.clk.Add(time.Minute)
	for i := range 50 {
		stranger := mcpauthtest.NewKey(t, "made-up-"+string(rune('a'+i%26)), jose.ES256)
		f.refused(t, mcpauthtest.MintWith(t, stranger, f.claims("x")), mcpauth.OutcomeUnknownKey)
	}
	if n := f.is.JWKSFetches(); n != 2 {
		t.Fatalf("%d JWKS fetches after 50 unknown key ids, want 2", n)
	}
	// The issuer rotates: new key first, old one still published.
	fresh := mcpauthtest.NewKey(t, "k2", jose.ES256)
	f.is.Publish(fresh, old)
	newToken := f.is.Mint(f.claims("user-1"))
	f.refused(t, newToken, mcpauth.OutcomeUnknownKey) // within the interval of the last fetch
	f.clk.Add(time.Minute)
	if _, err := f.v.Validate(t.Context(), newToken); err != nil {
		t.Fatalf("the rotated key was not picked up: %v", err)
	}
	if _, err := f.v.Validate(t.Context(), oldToken); err != nil {
		t.Fatalf("the old key, still published: %v", err)
	}
	// The old key retires; after KeysTTL the keys are fetched again behind
	// a request, and then the old key no longer verifies.
	f.is.Publish(fresh)
	f.clk.Add(time.Hour)
	before := f.is.JWKSFetches()
	if _, err := f.v.Validate(t.Context(), f.is.Mint(f.claims("user-1"))); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 10*time.Second, "the keys refreshed behind the request", func() bool {
		return f.is.JWKSFetches() > before && testutil.ToFloat64(f.m.JWKSRefreshes.WithLabelValues(metrics.RefreshOK)) == 4
	})
	f.refused(t, mcpauthtest.MintWith(t, old, f.claims("user-1")), mcpauth.OutcomeUnknownKey)
	// A token that verified (and was remembered) under the retired key is
	// refused too: withdrawing a key revokes what it signed.
	f.refused(t, oldToken, mcpauth.OutcomeUnknownKey)
}

// TestRememberedTokenExpires: a token validated once is refused after its
// exp like one never seen.
func TestRememberedTokenExpires(t *testing.T) {
	f := newFixture(t, func(c *mcpauth.Config) { c.Leeway = -1 })
	c := f.claims("user-1")
	c["exp"] = f.clk.Now().Add(time.Minute).Unix()
	token := f.is.Mint(c)
	for range 2 {
		if _, err := f.v.Validate(t.Context(), token); err != nil {
			t.Fatal(err)
		}
	}
	f.clk.Add(time.Minute + time.Second)
	f.refused(t, token, mcpauth.OutcomeExpired)
}
