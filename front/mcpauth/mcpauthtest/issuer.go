// Package mcpauthtest is an OAuth issuer for tests: it serves its metadata
// (RFC 8414), its JWKS and a dynamic client registration endpoint (RFC
// 7591) on a loopback httptest server, signs access tokens with keys of its
// own, rotates them, and can stop answering.
package mcpauthtest

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

// Key is a signing key of the issuer.
type Key struct {
	ID  string
	Alg jose.SignatureAlgorithm
	Key crypto.Signer
}

// NewKey makes a key: RS256 (2048-bit RSA) or ES256 (P-256).
func NewKey(t testing.TB, id string, alg jose.SignatureAlgorithm) Key {
	t.Helper()
	var k crypto.Signer
	var err error
	switch alg {
	case jose.RS256, jose.PS256:
		k, err = rsa.GenerateKey(rand.Reader, 2048)
	case jose.ES256:
		k, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	default:
		t.Fatalf("mcpauthtest: no key for %s", alg)
	}
	if err != nil {
		t.Fatal(err)
	}
	return Key{ID: id, Alg: alg, Key: k}
}

// Public is the key as its JWKS entry.
func (k Key) Public() jose.JSONWebKey {
	return jose.JSONWebKey{Key: k.Key.Public(), KeyID: k.ID, Algorithm: string(k.Alg), Use: "sig"}
}

// Issuer is a running test issuer.
type Issuer struct {
	t      testing.TB
	srv    *httptest.Server
	mu     sync.Mutex
	keys   []Key // published, the first signs
	down   bool  // answer 503 to everything
	jwks   atomic.Int64
	intro  func(form map[string][]string) (int, any) // the introspection endpoint's answer
	Intros atomic.Int64                              // introspection requests
	Regs   atomic.Int64                              // clients registered
}

// NewIssuer starts an issuer publishing one RS256 key, stopped when the
// test ends.
func NewIssuer(t testing.TB) *Issuer {
	t.Helper()
	is := &Issuer{t: t, keys: []Key{NewKey(t, "k1", jose.RS256)}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/oauth-authorization-server", func(w http.ResponseWriter, r *http.Request) {
		if is.isDown(w) {
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{
			"issuer": is.URL(), "authorization_endpoint": is.URL() + "/authorize", "token_endpoint": is.URL() + "/token",
			"jwks_uri": is.URL() + "/jwks", "introspection_endpoint": is.URL() + "/introspect",
			"registration_endpoint":    is.URL() + "/register",
			"response_types_supported": []string{"code"}, "code_challenge_methods_supported": []string{"S256"},
		})
	})
	mux.HandleFunc("GET /jwks", func(w http.ResponseWriter, r *http.Request) {
		is.jwks.Add(1)
		if is.isDown(w) {
			return
		}
		is.mu.Lock()
		var set jose.JSONWebKeySet
		for _, k := range is.keys {
			set.Keys = append(set.Keys, k.Public())
		}
		is.mu.Unlock()
		w.Header().Set("Content-Type", "application/jwk-set+json")
		json.NewEncoder(w).Encode(set)
	})
	mux.HandleFunc("POST /introspect", func(w http.ResponseWriter, r *http.Request) {
		is.Intros.Add(1)
		if is.isDown(w) {
			return
		}
		if id, secret, ok := r.BasicAuth(); !ok || id != "ticketrelay" || secret != "s3cret" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		if err := r.ParseForm(); err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		is.mu.Lock()
		answer := is.intro
		is.mu.Unlock()
		code, body := http.StatusOK, any(map[string]any{"active": false})
		if answer != nil {
			code, body = answer(r.PostForm)
		}
		writeJSON(w, code, body)
	})
	mux.HandleFunc("POST /register", is.register)
	// Started after is.srv is set: the handlers read it, and a client in
	// another process learns the URL with no synchronization of ours.
	is.srv = httptest.NewUnstartedServer(mux)
	is.srv.Start()
	t.Cleanup(is.srv.Close)
	return is
}

// register is RFC 7591's endpoint, open to anyone as MCP clients expect:
// client metadata for the authorization code flow (redirect_uris given)
// gets 201 with a new client_id and the metadata echoed, and a
// client_secret unless the client authenticates with "none".
func (is *Issuer) register(w http.ResponseWriter, r *http.Request) {
	if is.isDown(w) {
		return
	}
	var md map[string]any
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10)).Decode(&md); err != nil || md == nil {
		writeJSON(w, http.StatusBadRequest, map[string]any{"error": "invalid_client_metadata", "error_description": "the body is not a JSON object"})
		return
	}
	uris, _ := md["redirect_uris"].([]any)
	for _, u := range uris {
		if s, ok := u.(string); !ok || s == "" {
			uris = nil
			break
		}
	}
	if len(uris) == 0 {
		writeJSON(w, http.StatusBadRequest, map[string]any{"error": "invalid_redirect_uri", "error_description": "redirect_uris must be a list of URIs"})
		return
	}
	md["client_id"] = fmt.Sprintf("client-%d", is.Regs.Add(1))
	md["client_id_issued_at"] = time.Now().Unix()
	if md["token_endpoint_auth_method"] != "none" {
		md["client_secret"] = rand.Text()
		md["client_secret_expires_at"] = 0
	}
	writeJSON(w, http.StatusCreated, md)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}

func (is *Issuer) isDown(w http.ResponseWriter) bool {
	is.mu.Lock()
	defer is.mu.Unlock()
	if is.down {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	return is.down
}

// URL is the issuer identifier (its iss).
func (is *Issuer) URL() string { return is.srv.URL }

// JWKSURL is where it publishes its keys.
func (is *Issuer) JWKSURL() string { return is.srv.URL + "/jwks" }

// JWKSFetches counts the requests for its JWKS.
func (is *Issuer) JWKSFetches() int64 { return is.jwks.Load() }

// SetDown makes every endpoint answer 503 (or answer again).
func (is *Issuer) SetDown(down bool) {
	is.mu.Lock()
	defer is.mu.Unlock()
	is.down = down
}

// Publish replaces the published keys; the first signs from now on.
func (is *Issuer) Publish(keys ...Key) {
	is.mu.Lock()
	defer is.mu.Unlock()
	is.keys = keys
}

// Signer is the key that signs.
func (is *Issuer) Signer() Key {
	is.mu.Lock()
	defer is.mu.Unlock()
	return is.keys[0]
}

// Introspect sets the introspection endpoint's answer to a request whose
// client authenticated as ticketrelay/s3cret.
func (is *Issuer) Introspect(answer func(form map[string][]string) (int, any)) {
	is.mu.Lock()
	defer is.mu.Unlock()
	is.intro = answer
}

// Claims returns the claims of a valid access token for sub, meant for
// audience, issued now and valid for ten minutes.
func (is *Issuer) Claims(sub, audience string, now time.Time) map[string]any {
	return map[string]any{
		"iss": is.URL(), "sub": sub, "aud": []string{audience}, "client_id": "test-client",
		"iat": now.Unix(), "nbf": now.Unix(), "exp": now.Add(10 * time.Minute).Unix(),
		"scope": "tickets", "jti": fmt.Sprint(now.UnixNano()),
	}
}

// Mint signs claims with the issuer's signing key.
func (is *Issuer) Mint(claims map[string]any) string {
	return MintWith(is.t, is.Signer(), claims)
}

// MintWith signs claims with k, naming k.ID in the header.
func MintWith(t testing.TB, k Key, claims map[string]any) string {
	t.Helper()
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: k.Alg, Key: jose.JSONWebKey{Key: k.Key, KeyID: k.ID}},
		(&jose.SignerOptions{}).WithType("at+jwt"))
	if err != nil {
		t.Fatal(err)
	}
	tok, err := jwt.Signed(s).Claims(claims).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}
