package mcpauth

import (
	"bytes"
	"context"
	"crypto"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/modelcontextprotocol/go-sdk/oauthex"
)

// Bounds of what is read from the issuer.
const (
	maxDocumentBytes = 1 << 20 // a metadata document or JWKS
	maxKeys          = 100     // signing keys kept from one JWKS
	fetchTimeout     = 10 * time.Second
)

// keyCache holds the issuer's signing keys. It fetches them when first
// needed, again when they are older than ttl, and when a token names a
// key it does not hold, but never twice within minInterval: a flood of
// tokens with made-up key ids costs the issuer at most one fetch per
// interval. A failed fetch keeps the keys held: a JWKS that cannot be
// reached does not stop tokens signed by known keys.
type keyCache struct {
	v *Validator

	mu       sync.Mutex
	jwksURL  string // discovered from the issuer's metadata if not configured
	keys     []jose.JSONWebKey
	fetched  time.Time     // last successful fetch
	tried    time.Time     // last attempt
	inflight chan struct{} // closed when the running fetch ends; nil if none
	lastErr  error

	// gen counts the fetches that withdrew a key: a token cached as
	// verified under an older generation is verified again.
	gen atomic.Uint64
}

// generation is the keys' generation (see gen).
func (c *keyCache) generation() uint64 { return c.gen.Load() }

// withdrawn reports whether a key of held is not among fetched.
func withdrawn(held, fetched []jose.JSONWebKey) bool {
	for _, h := range held {
		ht, err := h.Thumbprint(crypto.SHA256)
		if err != nil {
			return true
		}
		if !slices.ContainsFunc(fetched, func(f jose.JSONWebKey) bool {
			ft, err := f.Thumbprint(crypto.SHA256)
			return err == nil && f.KeyID == h.KeyID && f.Algorithm == h.Algorithm && bytes.Equal(ft, ht)
		}) {
			return true
		}
	}
	return false
}

// lookup returns the keys that may have signed a token with header kid and
// alg, fetching the JWKS first if it holds none of them and the cache
// allows a fetch. Keys that are merely old are returned at once and
// refreshed behind the request.
func (c *keyCache) lookup(ctx context.Context, kid, alg string) ([]jose.JSONWebKey, error) {
	for attempt := 0; ; attempt++ {
		c.mu.Lock()
		now := c.v.now()
		found := matching(c.keys, kid, alg)
		mayFetch := c.inflight == nil && (c.tried.IsZero() || now.Sub(c.tried) >= c.v.cfg.MinRefreshInterval)
		if len(found) > 0 {
			if mayFetch && now.Sub(c.fetched) >= c.v.cfg.KeysTTL {
				c.start(now)
				go c.refresh(ctx)
			}
			c.mu.Unlock()
			return found, nil
		}
		if attempt == 0 && c.inflight != nil {
			// Another request is fetching: its keys may be the ones.
			done := c.inflight
			c.mu.Unlock()
			select {
			case <-done:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			continue
		}
		if attempt == 0 && mayFetch {
			c.start(now)
			c.mu.Unlock()
			c.refresh(ctx)
			continue
		}
		held, lastErr := len(c.keys), c.lastErr
		c.mu.Unlock()
		if held == 0 {
			return nil, &Error{Outcome: OutcomeNoKey, Reason: "no signing key of the issuer is available", Err: lastErr}
		}
		return nil, &Error{Outcome: OutcomeUnknownKey, Reason: "the token names a signing key the issuer does not publish"}
	}
}

// start marks a fetch as running; c.mu is held.
func (c *keyCache) start(now time.Time) {
	c.inflight = make(chan struct{})
	c.tried = now
}

// Refresh fetches the issuer's keys now (at startup), whatever the cache
// holds, and reports why it failed.
func (c *keyCache) Refresh(ctx context.Context) error {
	c.mu.Lock()
	if c.inflight != nil {
		done := c.inflight
		c.mu.Unlock()
		<-done
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.lastErr
	}
	c.start(c.v.now())
	c.mu.Unlock()
	return c.refresh(ctx)
}

// refresh runs one fetch; the caller set inflight. It is not tied to the
// request that asked for it beyond fetchTimeout: the keys serve everyone.
func (c *keyCache) refresh(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), fetchTimeout)
	defer cancel()
	keys, jwksURL, err := c.fetch(ctx)
	c.mu.Lock()
	defer c.mu.Unlock()
	close(c.inflight)
	c.inflight = nil
	c.lastErr = err
	if err != nil {
		c.v.cfg.Metrics.Refreshed(false, 0)
		c.v.cfg.Logger.Error("OAuth signing keys could not be fetched; keys already held still serve",
			"issuer", c.v.cfg.Issuer, "jwks", jwksURL, "keys_held", len(c.keys), "err", err)
		return err
	}
	if withdrawn(c.keys, keys) {
		c.gen.Add(1)
	}
	c.jwksURL, c.keys, c.fetched = jwksURL, keys, c.v.now()
	c.v.cfg.Metrics.Refreshed(true, len(keys))
	c.v.cfg.Logger.Info("OAuth signing keys fetched", "issuer", c.v.cfg.Issuer, "jwks", jwksURL, "keys", len(keys))
	return nil
}

func (c *keyCache) fetch(ctx context.Context) ([]jose.JSONWebKey, string, error) {
	c.mu.Lock()
	jwksURL := c.jwksURL
	c.mu.Unlock()
	if jwksURL == "" {
		meta, err := c.v.metadata(ctx)
		if err != nil {
			return nil, "", err
		}
		if meta.JWKSURI == "" {
			return nil, "", fmt.Errorf("the metadata of issuer %s names no jwks_uri", c.v.cfg.Issuer)
		}
		jwksURL = meta.JWKSURI
	}
	var set struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := getJSON(ctx, c.v.cfg.HTTPClient, jwksURL, &set); err != nil {
		return nil, jwksURL, fmt.Errorf("JWKS: %w", err)
	}
	var keys []jose.JSONWebKey
	for i, raw := range set.Keys {
		var k jose.JSONWebKey
		if err := k.UnmarshalJSON(raw); err != nil {
			// One key of a kind this build does not know must not
			// hide the others.
			c.v.cfg.Logger.Warn("OAuth signing key skipped", "jwks", jwksURL, "index", i, "err", err)
			continue
		}
		if !k.Valid() || !k.IsPublic() || (k.Use != "" && k.Use != "sig") {
			continue // a symmetric or encryption key never verifies a token
		}
		keys = append(keys, k)
		if len(keys) == maxKeys {
			break
		}
	}
	if len(keys) == 0 {
		return nil, jwksURL, fmt.Errorf("JWKS %s holds no public signing key", jwksURL)
	}
	return keys, jwksURL, nil
}

// matching returns the keys of keys that may verify a token whose header
// names kid and alg: the one with that kid, or with no kid every key;
// a key that states its algorithm must state alg.
func matching(keys []jose.JSONWebKey, kid, alg string) []jose.JSONWebKey {
	var out []jose.JSONWebKey
	for _, k := range keys {
		if (kid == "" || k.KeyID == kid) && (k.Algorithm == "" || k.Algorithm == alg) {
			out = append(out, k)
		}
	}
	return out
}

// metadata fetches the issuer's authorization server metadata (RFC 8414,
// or OpenID Connect discovery), at the well-known URLs the MCP
// specification lists, and checks that it names the issuer.
func (v *Validator) metadata(ctx context.Context) (*oauthex.AuthServerMeta, error) {
	var errs []error
	for _, u := range metadataURLs(v.cfg.Issuer) {
		var meta oauthex.AuthServerMeta
		err := getJSON(ctx, v.cfg.HTTPClient, u, &meta)
		var st *statusError
		switch {
		case errors.As(err, &st) && st.code >= 400 && st.code < 500:
			errs = append(errs, err)
			continue
		case err != nil:
			return nil, fmt.Errorf("metadata of issuer %s: %w", v.cfg.Issuer, err)
		case meta.Issuer != v.cfg.Issuer:
			return nil, fmt.Errorf("metadata at %s names issuer %q, not %q", u, meta.Issuer, v.cfg.Issuer)
		}
		return &meta, nil
	}
	return nil, fmt.Errorf("no metadata for issuer %s: %w", v.cfg.Issuer, errors.Join(errs...))
}

// metadataURLs are where the MCP specification (2025-11-25, "Authorization
// Server Metadata Discovery") looks for an issuer's metadata, in order.
func metadataURLs(issuer string) []string {
	u, err := url.Parse(issuer)
	if err != nil {
		return nil
	}
	p := strings.Trim(u.Path, "/")
	at := func(path string) string {
		c := *u
		c.Path = path
		return c.String()
	}
	if p == "" {
		return []string{at("/.well-known/oauth-authorization-server"), at("/.well-known/openid-configuration")}
	}
	return []string{
		at("/.well-known/oauth-authorization-server/" + p),
		at("/.well-known/openid-configuration/" + p),
		at("/" + p + "/.well-known/openid-configuration"),
	}
}

type statusError struct {
	url  string
	code int
}

func (e *statusError) Error() string { return fmt.Sprintf("%s answered %d", e.url, e.code) }

// getJSON fetches a JSON document of at most maxDocumentBytes into dst.
func getJSON(ctx context.Context, c *http.Client, u string, dst any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return decodeJSON(resp, dst)
}

// decodeJSON reads a 200 answer holding JSON (some issuers say
// application/jwk-set+json) into dst.
func decodeJSON(resp *http.Response, dst any) error {
	if resp.StatusCode != http.StatusOK {
		io.Copy(io.Discard, io.LimitReader(resp.Body, maxDocumentBytes))
		return &statusError{url: resp.Request.URL.Redacted(), code: resp.StatusCode}
	}
	if mt, _, err := mime.ParseMediaType(resp.Header.Get("Content-Type")); err != nil || (mt != "application/json" && !strings.HasSuffix(mt, "+json")) {
		return fmt.Errorf("%s: content type %q, want JSON", resp.Request.URL.Redacted(), resp.Header.Get("Content-Type"))
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxDocumentBytes+1))
	if err != nil {
		return err
	}
	if len(b) > maxDocumentBytes {
		return fmt.Errorf("%s: more than %d bytes", resp.Request.URL.Redacted(), maxDocumentBytes)
	}
	if err := json.Unmarshal(b, dst); err != nil {
		return fmt.Errorf("%s: %w", resp.Request.URL.Redacted(), err)
	}
	return nil
}
