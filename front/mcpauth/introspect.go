package mcpauth

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/go-jose/go-jose/v4/jwt"
)

// Introspection is the RFC 7662 endpoint that validates opaque tokens,
// and this resource server's credentials there.
type Introspection struct {
	URL          string // empty: the introspection_endpoint of the issuer's metadata
	ClientID     string
	ClientSecret string
	// CacheTTL bounds how long an active answer is reused for the same
	// token (never past its exp). Default DefaultIntrospectionCacheTTL.
	CacheTTL time.Duration
}

// DefaultIntrospectionCacheTTL: a token revoked at the issuer is refused
// at most this long after.
const DefaultIntrospectionCacheTTL = 30 * time.Second

type introspector struct {
	v   *Validator
	cfg Introspection

	mu    sync.Mutex
	url   string
	cache *tokenCache
}

func newIntrospector(v *Validator, cfg Introspection) (*introspector, error) {
	if cfg.URL != "" {
		if err := checkURL("introspection URL", cfg.URL); err != nil {
			return nil, err
		}
	}
	if cfg.ClientID == "" || cfg.ClientSecret == "" {
		return nil, errors.New("introspection needs this server's client id and secret at the issuer")
	}
	if cfg.CacheTTL <= 0 {
		cfg.CacheTTL = DefaultIntrospectionCacheTTL
	}
	return &introspector{v: v, cfg: cfg, url: cfg.URL, cache: newTokenCache()}, nil
}

// answer is an introspection response (RFC 7662 §2.2).
type answer struct {
	Active    bool             `json:"active"`
	Scope     string           `json:"scope"`
	ClientID  string           `json:"client_id"`
	Username  string           `json:"username"`
	TokenType string           `json:"token_type"`
	Subject   string           `json:"sub"`
	Audience  jwt.Audience     `json:"aud"`
	Issuer    string           `json:"iss"`
	Expiry    *jwt.NumericDate `json:"exp"`
	NotBefore *jwt.NumericDate `json:"nbf"`
	IssuedAt  *jwt.NumericDate `json:"iat"`
	Name      string           `json:"name"`
	Email     string           `json:"email"`
}

func (in *introspector) validate(ctx context.Context, token string) (Principal, error) {
	sum := sha256.Sum256([]byte(token))
	now := in.v.now()
	if p, ok := in.cache.get(sum, now, 0); ok {
		return p, nil
	}

	a, raw, err := in.ask(ctx, token)
	if err != nil {
		return Principal{}, &Error{Outcome: OutcomeIntrospectionFailed, Reason: "the token could not be introspected", Err: err}
	}
	if !a.Active {
		return Principal{}, refuse(OutcomeInactive, "the issuer says the token is not active")
	}
	if a.Issuer == "" {
		a.Issuer = in.v.cfg.Issuer // the issuer's own endpoint answered
	}
	if a.Expiry == nil {
		return Principal{}, refuse(OutcomeMalformed, "the introspection answer has no exp")
	}
	if raw == nil {
		raw = map[string]json.RawMessage{}
	}
	p, err := in.v.check(claims{Issuer: a.Issuer, Subject: a.Subject, Audience: a.Audience, Expiry: a.Expiry,
		NotBefore: a.NotBefore, IssuedAt: a.IssuedAt, Scope: a.Scope, ClientID: a.ClientID, Name: a.Name,
		Email: a.Email, raw: raw})
	if err != nil {
		return Principal{}, err
	}
	in.cache.put(sum, now, cached{p: p, until: now.Add(in.cfg.CacheTTL)})
	return p, nil
}

// ask posts the token to the introspection endpoint, authenticated as this
// resource server (client_secret_basic, RFC 6749 §2.3.1).
func (in *introspector) ask(ctx context.Context, token string) (answer, map[string]json.RawMessage, error) {
	in.mu.Lock()
	endpoint := in.url
	in.mu.Unlock()
	if endpoint == "" {
		meta, err := in.v.metadata(ctx)
		if err != nil {
			return answer{}, nil, err
		}
		if meta.IntrospectionEndpoint == "" {
			return answer{}, nil, fmt.Errorf("the metadata of issuer %s names no introspection_endpoint", in.v.cfg.Issuer)
		}
		endpoint = meta.IntrospectionEndpoint
		in.mu.Lock()
		in.url = endpoint
		in.mu.Unlock()
	}
	ctx, cancel := context.WithTimeout(ctx, fetchTimeout)
	defer cancel()
	form := url.Values{"token": {token}, "token_type_hint": {"access_token"}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, strings.NewReader(form.Encode()))
	if err != nil {
		return answer{}, nil, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	req.SetBasicAuth(url.QueryEscape(in.cfg.ClientID), url.QueryEscape(in.cfg.ClientSecret))
	resp, err := in.v.cfg.HTTPClient.Do(req)
	if err != nil {
		return answer{}, nil, err
	}
	defer resp.Body.Close()
	var raw map[string]json.RawMessage
	if err := decodeJSON(resp, &raw); err != nil {
		return answer{}, nil, err
	}
	var a answer
	b, _ := json.Marshal(raw)
	if err := json.Unmarshal(b, &a); err != nil {
		return answer{}, nil, fmt.Errorf("introspection answer: %w", err)
	}
	return a, raw, nil
}
