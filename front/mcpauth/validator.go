package mcpauth

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/oauthex"

	"ticketrelay/metrics"
)

// Outcomes of a validation: the "outcome" label of
// ticketrelay_oauth_token_validations_total and Error.Outcome.
const (
	OutcomeOK                  = "ok"
	OutcomeExpired             = "expired"
	OutcomeNotYetValid         = "not_yet_valid"
	OutcomeBadSignature        = "bad_signature"
	OutcomeWrongIssuer         = "wrong_issuer"
	OutcomeWrongAudience       = "wrong_audience"
	OutcomeBadAlgorithm        = "bad_algorithm"
	OutcomeMalformed           = "malformed"
	OutcomeTooLarge            = "too_large"
	OutcomeUnknownKey          = "unknown_key"
	OutcomeNoKey               = "no_key"
	OutcomeInactive            = "inactive"
	OutcomeIntrospectionFailed = "introspection_failed"
)

// Outcomes lists every outcome, for metrics exported at 0.
var Outcomes = []string{OutcomeOK, OutcomeExpired, OutcomeNotYetValid, OutcomeBadSignature, OutcomeWrongIssuer,
	OutcomeWrongAudience, OutcomeBadAlgorithm, OutcomeMalformed, OutcomeTooLarge, OutcomeUnknownKey, OutcomeNoKey,
	OutcomeInactive, OutcomeIntrospectionFailed}

// Error is why a token was refused. It wraps auth.ErrInvalidToken: every
// refusal is a 401.
type Error struct {
	Outcome string // one of the Outcome* words
	Reason  string // for the log line and the 401's error_description; never holds the token
	Err     error  // the cause, if any (a fetch that failed)
}

func (e *Error) Error() string {
	if e.Err != nil {
		return e.Reason + ": " + e.Err.Error()
	}
	return e.Reason
}

func (e *Error) Unwrap() []error { return []error{auth.ErrInvalidToken, e.Err} }

func refuse(outcome, format string, args ...any) *Error {
	return &Error{Outcome: outcome, Reason: fmt.Sprintf(format, args...)}
}

// DefaultAlgorithms are the signature algorithms accepted unless
// Config.Algorithms narrows them: asymmetric only. "none" and the HMAC
// algorithms are never accepted: a token "signed" with HS256 and the
// issuer's public key as the secret is the classic forgery.
var DefaultAlgorithms = []string{"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}

// Defaults and bounds of Config.
const (
	DefaultLeeway             = 30 * time.Second
	MaxLeeway                 = 5 * time.Minute
	DefaultMaxTokenBytes      = 8 << 10
	DefaultKeysTTL            = time.Hour
	DefaultMinRefreshInterval = 30 * time.Second
	DefaultGroupsClaim        = "groups"
	// Bounds of the claims of a valid token: one past them is refused as
	// too large rather than carried into every request.
	maxClaimLen = 1024 // iss, sub, name, email, client id, each scope and group
	maxValues   = 256  // scopes, groups
)

// Config says which access tokens a Validator accepts.
type Config struct {
	// Issuer is the authorization server whose tokens are accepted: their
	// iss must be exactly this.
	Issuer string
	// Audience is what a token's aud must name (a trailing "/" aside):
	// this resource's canonical URL (RFC 8707, RFC 9728), or the value an
	// issuer puts there instead (Entra ID's v2 tokens: the API's
	// application id).
	Audience string
	// JWKSURL is where the issuer publishes its signing keys; empty: the
	// jwks_uri of the issuer's metadata.
	JWKSURL string
	// Introspection, if set, validates tokens that are not JWTs (opaque
	// tokens) at the issuer's RFC 7662 endpoint. Without it they are
	// refused.
	Introspection *Introspection
	// Algorithms narrows DefaultAlgorithms (the default).
	Algorithms []string
	// Leeway is the clock skew allowed on exp, nbf and iat. Default
	// DefaultLeeway; negative: none; at most MaxLeeway.
	Leeway time.Duration
	// GroupsClaim names the claim that lists the user's groups. Default
	// "groups"; a name with "/" or ":" (Auth0's namespaced claims) is
	// taken whole.
	GroupsClaim string
	// MaxTokenBytes bounds a token (refused as too large beyond). Default
	// DefaultMaxTokenBytes.
	MaxTokenBytes int
	// KeysTTL is how long fetched keys are used before they are fetched
	// again (behind the requests, which keep the old keys meanwhile).
	// Default DefaultKeysTTL.
	KeysTTL time.Duration
	// MinRefreshInterval is the least time between two fetches of the
	// keys, however many tokens name a key not held. Default
	// DefaultMinRefreshInterval.
	MinRefreshInterval time.Duration
	HTTPClient         *http.Client // for the issuer; default one with a 10 s timeout
	Now                func() time.Time
	Logger             *slog.Logger
	Metrics            *metrics.OAuth // nil: none
}

// Validator validates access tokens of one issuer for one resource.
type Validator struct {
	cfg      Config
	algs     []jose.SignatureAlgorithm
	keys     *keyCache
	verified *tokenCache   // JWTs whose signature and claims checked out
	intro    *introspector // nil: opaque tokens refused
}

// New checks cfg and returns its validator. It does not reach the issuer:
// call Refresh to fetch the keys at startup.
func New(cfg Config) (*Validator, error) {
	if err := checkURL("issuer", cfg.Issuer); err != nil {
		return nil, err
	}
	if strings.TrimSpace(cfg.Audience) == "" {
		return nil, errors.New("no audience: tokens must be meant for this resource")
	}
	if cfg.JWKSURL != "" {
		if err := checkURL("JWKS URL", cfg.JWKSURL); err != nil {
			return nil, err
		}
	}
	if cfg.Algorithms == nil {
		cfg.Algorithms = DefaultAlgorithms
	}
	var algs []jose.SignatureAlgorithm
	for _, a := range cfg.Algorithms {
		if !slices.Contains(DefaultAlgorithms, a) {
			return nil, fmt.Errorf("signature algorithm %q: want some of %s (asymmetric only)", a, strings.Join(DefaultAlgorithms, ", "))
		}
		algs = append(algs, jose.SignatureAlgorithm(a))
	}
	if len(algs) == 0 {
		return nil, errors.New("no signature algorithm accepted")
	}
	switch {
	case cfg.Leeway == 0:
		cfg.Leeway = DefaultLeeway
	case cfg.Leeway < 0:
		cfg.Leeway = 0
	case cfg.Leeway > MaxLeeway:
		return nil, fmt.Errorf("leeway %v: want at most %v", cfg.Leeway, MaxLeeway)
	}
	if cfg.GroupsClaim == "" {
		cfg.GroupsClaim = DefaultGroupsClaim
	}
	if cfg.MaxTokenBytes <= 0 {
		cfg.MaxTokenBytes = DefaultMaxTokenBytes
	}
	if cfg.KeysTTL <= 0 {
		cfg.KeysTTL = DefaultKeysTTL
	}
	if cfg.MinRefreshInterval <= 0 {
		cfg.MinRefreshInterval = DefaultMinRefreshInterval
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{Timeout: fetchTimeout}
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	v := &Validator{cfg: cfg, algs: algs, verified: newTokenCache()}
	v.keys = &keyCache{v: v, jwksURL: cfg.JWKSURL}
	if cfg.Introspection != nil {
		in, err := newIntrospector(v, *cfg.Introspection)
		if err != nil {
			return nil, err
		}
		v.intro = in
	}
	return v, nil
}

func checkURL(what, s string) error {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.Fragment != "" {
		return fmt.Errorf("%s %q: want an absolute http(s) URL", what, s)
	}
	return nil
}

// Issuer is the issuer whose tokens v accepts.
func (v *Validator) Issuer() string { return v.cfg.Issuer }

// Leeway is the clock skew v allows.
func (v *Validator) Leeway() time.Duration { return v.cfg.Leeway }

// Metadata is the issuer's authorization server metadata (its endpoints),
// found where the MCP specification looks: for a client of the issuer.
func (v *Validator) Metadata(ctx context.Context) (*oauthex.AuthServerMeta, error) {
	return v.metadata(ctx)
}

// Refresh fetches the issuer's signing keys now. mcp-front calls it at
// startup: a failure is logged and counted, and is not fatal (static
// tokens keep working; the keys are fetched again when a token needs them).
func (v *Validator) Refresh(ctx context.Context) error { return v.keys.Refresh(ctx) }

func (v *Validator) now() time.Time { return v.cfg.Now() }

// Validate checks token and returns whom it speaks for, or an *Error. Each
// validation is counted by outcome.
func (v *Validator) Validate(ctx context.Context, token string) (Principal, error) {
	p, err := v.validate(ctx, token)
	var e *Error
	switch {
	case err == nil:
		v.cfg.Metrics.Validated(OutcomeOK)
	case errors.As(err, &e):
		v.cfg.Metrics.Validated(e.Outcome)
	}
	return p, err
}

func (v *Validator) validate(ctx context.Context, token string) (Principal, error) {
	if len(token) > v.cfg.MaxTokenBytes {
		return Principal{}, refuse(OutcomeTooLarge, "the token is %d bytes long; at most %d are accepted", len(token), v.cfg.MaxTokenBytes)
	}
	if strings.Count(token, ".") != 2 {
		if v.intro != nil {
			return v.intro.validate(ctx, token)
		}
		return Principal{}, refuse(OutcomeMalformed, "the token is not a JWT (and opaque tokens are not introspected)")
	}
	sum, gen := sha256.Sum256([]byte(token)), v.keys.generation()
	if p, ok := v.verified.get(sum, v.now(), gen); ok {
		return p, nil
	}
	head, err := header(token)
	if err != nil {
		return Principal{}, err
	}
	if !slices.Contains(v.algs, jose.SignatureAlgorithm(head.Alg)) {
		return Principal{}, refuse(OutcomeBadAlgorithm, "the token is signed with %q, which is not accepted", head.Alg)
	}
	if len(head.Crit) > 0 {
		return Principal{}, refuse(OutcomeMalformed, "the token's header has critical extensions")
	}
	jws, err := jose.ParseSignedCompact(token, v.algs)
	if err != nil {
		return Principal{}, refuse(OutcomeMalformed, "the token is not a well-formed signed JWT")
	}
	keys, err := v.keys.lookup(ctx, head.Kid, head.Alg)
	if err != nil {
		return Principal{}, err
	}
	var payload []byte
	for _, k := range keys {
		if payload, err = jws.Verify(k.Key); err == nil {
			break
		}
	}
	if err != nil {
		return Principal{}, refuse(OutcomeBadSignature, "the token's signature does not verify with the issuer's key")
	}
	var c claims
	if json.Unmarshal(payload, &c) != nil || json.Unmarshal(payload, &c.raw) != nil {
		return Principal{}, refuse(OutcomeMalformed, "the token's claims are not the JSON of an access token")
	}
	p, err := v.check(c)
	if err == nil {
		// Cached under the generation read before the keys were: a key
		// withdrawn meanwhile makes the entry stale at once.
		v.verified.put(sum, v.now(), cached{p: p, until: p.Expiry, gen: gen})
	}
	return p, err
}

type jwsHeader struct {
	Alg  string   `json:"alg"`
	Kid  string   `json:"kid"`
	Crit []string `json:"crit"`
}

// header decodes a JWT's header, to refuse its algorithm by name before
// anything else is done.
func header(token string) (jwsHeader, error) {
	var h jwsHeader
	seg, _, _ := strings.Cut(token, ".")
	b, err := base64.RawURLEncoding.DecodeString(seg)
	if err != nil || json.Unmarshal(b, &h) != nil {
		return h, refuse(OutcomeMalformed, "the token's header is not base64url JSON")
	}
	return h, nil
}

// claims are those of a JWT access token (RFC 9068) that make the
// principal, under the names the usual issuers give them.
type claims struct {
	Issuer    string           `json:"iss"`
	Subject   string           `json:"sub"`
	Audience  jwt.Audience     `json:"aud"`
	Expiry    *jwt.NumericDate `json:"exp"`
	NotBefore *jwt.NumericDate `json:"nbf"`
	IssuedAt  *jwt.NumericDate `json:"iat"`
	Scope     string           `json:"scope"`     // RFC 9068, Hydra, Keycloak, Auth0, Google
	ClientID  string           `json:"client_id"` // RFC 9068, Hydra
	AZP       string           `json:"azp"`       // Keycloak, Auth0, Entra v2
	AppID     string           `json:"appid"`     // Entra v1
	CID       string           `json:"cid"`       // Okta
	Name      string           `json:"name"`
	Email     string           `json:"email"`
	raw       map[string]json.RawMessage
}

// check verifies the claims of a token whose signature verified.
func (v *Validator) check(c claims) (Principal, error) {
	now := v.now()
	switch {
	case c.Issuer != v.cfg.Issuer:
		return Principal{}, refuse(OutcomeWrongIssuer, "the token's issuer is not %s", v.cfg.Issuer)
	case !oauthex.MatchesResource(c.Audience, v.cfg.Audience):
		return Principal{}, refuse(OutcomeWrongAudience, "the token is not meant for %s (its aud)", v.cfg.Audience)
	case c.Expiry == nil:
		return Principal{}, refuse(OutcomeMalformed, "the token has no exp")
	case now.After(c.Expiry.Time().Add(v.cfg.Leeway)):
		return Principal{}, refuse(OutcomeExpired, "the token expired at %s", c.Expiry.Time().UTC().Format(time.RFC3339))
	case c.NotBefore != nil && now.Add(v.cfg.Leeway).Before(c.NotBefore.Time()):
		return Principal{}, refuse(OutcomeNotYetValid, "the token is not valid before %s", c.NotBefore.Time().UTC().Format(time.RFC3339))
	case c.IssuedAt != nil && now.Add(v.cfg.Leeway).Before(c.IssuedAt.Time()):
		return Principal{}, refuse(OutcomeNotYetValid, "the token was issued in the future (%s)", c.IssuedAt.Time().UTC().Format(time.RFC3339))
	}
	p := Principal{Issuer: c.Issuer, Subject: c.Subject, Expiry: c.Expiry.Time(),
		Name: firstOf(c.Name, extString(c.raw, "name")), Email: firstOf(c.Email, extString(c.raw, "email")),
		ClientID: firstOf(c.ClientID, c.AZP, c.AppID, c.CID)}
	p.Scopes = strings.Fields(c.Scope)
	if len(p.Scopes) == 0 {
		s, err := stringList(c.raw["scp"]) // Entra (a string), Okta (a list)
		if err != nil {
			return Principal{}, refuse(OutcomeMalformed, "the token's scp is neither a string nor a list of strings")
		}
		p.Scopes = s
	}
	groups, err := stringList(claim(c.raw, v.cfg.GroupsClaim))
	if err != nil {
		return Principal{}, refuse(OutcomeMalformed, "the token's %s is neither a string nor a list of strings", v.cfg.GroupsClaim)
	}
	p.Groups = groups
	return p, v.bounded(p)
}

// claim finds a claim at the top level, or in Hydra's "ext" (where the
// access-token session data of a consent lands).
func claim(raw map[string]json.RawMessage, name string) json.RawMessage {
	if c, ok := raw[name]; ok {
		return c
	}
	var ext map[string]json.RawMessage
	if json.Unmarshal(raw["ext"], &ext) == nil {
		return ext[name]
	}
	return nil
}

// extString is a string claim of Hydra's "ext"; "" if absent or not a string.
func extString(raw map[string]json.RawMessage, name string) string {
	var ext map[string]json.RawMessage
	var s string
	if json.Unmarshal(raw["ext"], &ext) == nil {
		json.Unmarshal(ext[name], &s)
	}
	return s
}

// bounded refuses a principal with a claim too large to carry into every
// request, and one without a subject.
func (v *Validator) bounded(p Principal) error {
	if p.Subject == "" {
		return refuse(OutcomeMalformed, "the token has no sub")
	}
	for _, s := range []string{p.Issuer, p.Subject, p.Name, p.Email, p.ClientID} {
		if len(s) > maxClaimLen {
			return refuse(OutcomeTooLarge, "a claim of the token is over %d bytes", maxClaimLen)
		}
	}
	if len(p.Scopes) > maxValues || len(p.Groups) > maxValues {
		return refuse(OutcomeTooLarge, "the token lists over %d scopes or groups", maxValues)
	}
	for _, s := range slices.Concat(p.Scopes, p.Groups) {
		if len(s) > maxClaimLen {
			return refuse(OutcomeTooLarge, "a scope or group of the token is over %d bytes", maxClaimLen)
		}
	}
	return nil
}

// stringList reads a claim that is a list of strings or one
// space-separated string; absent is empty.
func stringList(raw json.RawMessage) ([]string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var list []string
	if err := json.Unmarshal(raw, &list); err == nil {
		return list, nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, err
	}
	return strings.Fields(s), nil
}

func firstOf(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}
