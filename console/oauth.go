package console

import (
	"context"
	"crypto/hmac"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/oauth2"

	"ticketrelay/front/mcpauth"
)

// OAuth signs operators in at an OAuth 2 authorization server: the
// console is a confidential client of it (authorization code with PKCE),
// and the access token it gets back is validated as mcp-front validates
// an agent's, then must carry the operator scope.
type OAuth struct {
	// Issuer names the authorization server on the sign-in page.
	Issuer string
	// Endpoints finds the issuer's authorization and token endpoints (in
	// its metadata). Asked at a sign-in until it answers, then remembered:
	// an issuer down when the dispatcher starts does not stop the console.
	Endpoints func(ctx context.Context) (authURL, tokenURL string, err error)
	// ClientID and ClientSecret are the console's registration at the
	// issuer; RedirectURL is the console's /oauth/callback as the browser
	// reaches it, registered with the client.
	ClientID, ClientSecret, RedirectURL string
	// Scope is the operator scope: asked for, and required of the token.
	Scope string
	// Validator checks the access token: issuer, signature, expiry, and
	// the console as its audience.
	Validator TokenValidator
	// HTTPClient reaches the token endpoint; nil: one with a 10 s timeout.
	HTTPClient *http.Client

	mu       sync.Mutex
	endpoint oauth2.Endpoint
}

// TokenValidator validates an access token (mcpauth.Validator).
type TokenValidator interface {
	Validate(ctx context.Context, token string) (mcpauth.Principal, error)
}

// oauthCookie holds the state and the PKCE verifier of a sign-in under
// way, in the browser that started it: a callback whose state is not the
// one this browser was sent with is refused (login CSRF), and the code is
// only worth anything with the verifier. SameSite=Lax: the callback is
// the issuer's redirect, a navigation from another site.
const oauthCookie = "ticketrelay_console_oauth"

// oauthTTL bounds the time from the sign-in link to the callback.
const oauthTTL = 10 * time.Minute

func (o *OAuth) config(ctx context.Context) (*oauth2.Config, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.endpoint.TokenURL == "" {
		auth, token, err := o.Endpoints(ctx)
		if err != nil {
			return nil, fmt.Errorf("the issuer's endpoints: %w", err)
		}
		o.endpoint = oauth2.Endpoint{AuthURL: auth, TokenURL: token, AuthStyle: oauth2.AuthStyleInHeader}
	}
	return &oauth2.Config{ClientID: o.ClientID, ClientSecret: o.ClientSecret, RedirectURL: o.RedirectURL,
		Endpoint: o.endpoint, Scopes: []string{o.Scope}}, nil
}

// oauthStart sends the browser to the issuer with a new state and PKCE
// challenge, both remembered in its cookie.
func (c *Console) oauthStart(w http.ResponseWriter, r *http.Request) {
	o := c.cfg.OAuth
	if o == nil {
		http.NotFound(w, r)
		return
	}
	cfg, err := o.config(r.Context())
	if err != nil {
		c.cfg.Log.Warn("console: OAuth sign-in", "err", err)
		w.WriteHeader(http.StatusBadGateway)
		c.render(w, r, "signin", map[string]any{"Error": "The issuer cannot be reached now: " + err.Error()})
		return
	}
	state, verifier := newID(), oauth2.GenerateVerifier()
	http.SetCookie(w, &http.Cookie{Name: oauthCookie, Value: state + "." + verifier, Path: "/oauth/", HttpOnly: true,
		SameSite: http.SameSiteLaxMode, Secure: r.TLS != nil, MaxAge: int(oauthTTL / time.Second)})
	http.Redirect(w, r, cfg.AuthCodeURL(state, oauth2.S256ChallengeOption(verifier)), http.StatusSeeOther)
}

// oauthCallback takes the issuer's answer: the state must be this
// browser's, the code is exchanged with the verifier, and the token must
// be valid for the console and carry the operator scope. Then the
// operator has the same session as with a token.
func (c *Console) oauthCallback(w http.ResponseWriter, r *http.Request) {
	o := c.cfg.OAuth
	if o == nil {
		http.NotFound(w, r)
		return
	}
	subject, err := c.oauthExchange(w, r, o)
	if err != nil {
		c.cfg.Log.Warn("console: OAuth sign-in refused", "remote", r.RemoteAddr, "err", err)
		w.WriteHeader(http.StatusUnauthorized)
		c.render(w, r, "signin", map[string]any{"Error": "Sign-in refused: " + err.Error()})
		return
	}
	c.startSession(w, r, subject)
	// A page of the console's own that moves on to the overview, not a
	// redirect: the navigation that reached the callback began at the
	// issuer, and a browser does not send the SameSite=Strict session
	// cookie on a cross-site navigation, which a redirect continues.
	c.render(w, r, "signedin", map[string]any{"Subject": subject})
}

// errOAuthState: the callback was not of a sign-in this browser started.
var errOAuthState = errors.New("this sign-in was not started from this browser, or took too long (start again)")

// oauthExchange checks the state, then exchanges the code. A callback
// with another state leaves this browser's sign-in under way: a forged
// one does not abort it.
func (c *Console) oauthExchange(w http.ResponseWriter, r *http.Request, o *OAuth) (string, error) {
	q := r.URL.Query()
	ck, err := r.Cookie(oauthCookie)
	if err != nil {
		return "", errOAuthState
	}
	state, verifier, ok := strings.Cut(ck.Value, ".")
	if !ok || state == "" || !hmac.Equal([]byte(state), []byte(q.Get("state"))) {
		return "", errOAuthState
	}
	http.SetCookie(w, &http.Cookie{Name: oauthCookie, Value: "", Path: "/oauth/", HttpOnly: true, SameSite: http.SameSiteLaxMode,
		Secure: r.TLS != nil, MaxAge: -1})
	if e := q.Get("error"); e != "" {
		return "", fmt.Errorf("the issuer answered %s: %s", e, q.Get("error_description"))
	}
	if q.Get("code") == "" {
		return "", errors.New("the issuer's answer holds no code")
	}
	hc := o.HTTPClient
	if hc == nil {
		hc = &http.Client{Timeout: 10 * time.Second}
	}
	ctx := context.WithValue(r.Context(), oauth2.HTTPClient, hc)
	cfg, err := o.config(ctx)
	if err != nil {
		return "", err
	}
	tok, err := cfg.Exchange(ctx, q.Get("code"), oauth2.VerifierOption(verifier))
	if err != nil {
		return "", fmt.Errorf("exchanging the code at the issuer: %w", err)
	}
	p, err := o.Validator.Validate(ctx, tok.AccessToken)
	if err != nil {
		return "", fmt.Errorf("the access token: %w", err)
	}
	if !slices.Contains(p.Scopes, o.Scope) {
		return "", fmt.Errorf("%s was not granted the operator scope %q", p.Subject, o.Scope)
	}
	return p.ID(), nil
}
