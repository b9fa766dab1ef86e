package console_test

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"ticketrelay/console"
	"ticketrelay/front/mcpauth"
	"ticketrelay/front/mcpauth/mcpauthtest"
)

// authServer is the authorization server's side of RFC 6749 §4.1 with
// RFC 7636 (S256): the test plays the user at the authorization
// endpoint (codes are handed out by grant), the console calls the token
// endpoint, which checks the client, the redirect URI and the verifier.
type authServer struct {
	is    *mcpauthtest.Issuer
	srv   *httptest.Server
	mu    sync.Mutex
	codes map[string]grant
}

type grant struct {
	challenge, redirect string
	claims              map[string]any
}

const (
	consoleURL   = "http://console.test"
	clientID     = "ticketrelay-console"
	clientSecret = "console-secret-0123456789"
)

func newAuthServer(t *testing.T) *authServer {
	a := &authServer{is: mcpauthtest.NewIssuer(t), codes: map[string]grant{}}
	a.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, secret, _ := r.BasicAuth()
		a.mu.Lock()
		g, ok := a.codes[r.PostFormValue("code")]
		delete(a.codes, r.PostFormValue("code"))
		a.mu.Unlock()
		sum := sha256.Sum256([]byte(r.PostFormValue("code_verifier")))
		w.Header().Set("Content-Type", "application/json")
		if id != clientID || secret != clientSecret || r.PostFormValue("grant_type") != "authorization_code" || !ok ||
			r.PostFormValue("redirect_uri") != g.redirect || base64.RawURLEncoding.EncodeToString(sum[:]) != g.challenge {
			w.WriteHeader(http.StatusBadRequest)
			json.NewEncoder(w).Encode(map[string]string{"error": "invalid_grant"})
			return
		}
		json.NewEncoder(w).Encode(map[string]any{"access_token": a.is.Mint(g.claims), "token_type": "Bearer", "expires_in": 300})
	}))
	t.Cleanup(a.srv.Close)
	return a
}

func (a *authServer) oauth(t *testing.T) *console.OAuth {
	v, err := mcpauth.New(mcpauth.Config{Issuer: a.is.URL(), Audience: consoleURL})
	if err != nil {
		t.Fatal(err)
	}
	return &console.OAuth{Issuer: a.is.URL(), ClientID: clientID, ClientSecret: clientSecret, RedirectURL: consoleURL + "/oauth/callback",
		Scope: "ticketrelay:operate", Validator: v,
		Endpoints: func(context.Context) (string, string, error) {
			return a.is.URL() + "/authorize", a.srv.URL + "/token", nil
		}}
}

// signIn goes from the console's sign-in link to its callback, the
// issuer granting claims, and returns the callback's answer.
func (a *authServer) signIn(t *testing.T, e *env, claims map[string]any) (int, string) {
	t.Helper()
	resp, err := e.c.Get(e.srv.URL + "/oauth/start")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	to, err := url.Parse(resp.Header.Get("Location"))
	if err != nil || resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign-in start: HTTP %d to %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	q := to.Query()
	if to.Path != "/authorize" || q.Get("response_type") != "code" || q.Get("client_id") != clientID || q.Get("scope") != "ticketrelay:operate" ||
		q.Get("code_challenge_method") != "S256" || q.Get("redirect_uri") != consoleURL+"/oauth/callback" || len(q.Get("state")) < 32 {
		t.Fatalf("the authorization request %s", to)
	}
	code := "code-" + q.Get("state")[:8]
	a.mu.Lock()
	a.codes[code] = grant{challenge: q.Get("code_challenge"), redirect: q.Get("redirect_uri"), claims: claims}
	a.mu.Unlock()
	return e.get(t, "/oauth/callback?"+url.Values{"code": {code}, "state": {q.Get("state")}}.Encode())
}

// An operator signs in at the issuer when the access token is for the
// console and carries the operator scope; otherwise no session starts.
func TestOAuthSignIn(t *testing.T) {
	a := newAuthServer(t)
	e := newEnvWith(t, console.Config{OAuth: a.oauth(t)})
	if code, body := e.get(t, "/signin"); code != 200 || !strings.Contains(body, `href="/oauth/start"`) || strings.Contains(body, `name="token"`) {
		t.Errorf("sign-in page %d:\n%s", code, body)
	}
	claims := func(sub, aud, scope string) map[string]any {
		c := a.is.Claims(sub, aud, time.Now())
		c["scope"] = scope
		return c
	}
	for name, c := range map[string]map[string]any{
		"without the scope":    claims("bo", consoleURL, "openid tickets"),
		"for another audience": claims("bo", "http://mcp.test/mcp", "ticketrelay:operate"),
	} {
		jar, _ := cookiejar.New(nil)
		e.c.Jar = jar
		if code, body := a.signIn(t, e, c); code != http.StatusUnauthorized || !strings.Contains(body, "Sign-in refused") {
			t.Errorf("%s: HTTP %d\n%s", name, code, body)
		}
		if code, _ := e.get(t, "/"); code != http.StatusSeeOther {
			t.Errorf("%s: the overview answered %d, want the sign-in form", name, code)
		}
	}
	jar, _ := cookiejar.New(nil)
	e.c.Jar = jar
	if code, body := a.signIn(t, e, claims("ada", consoleURL, "openid ticketrelay:operate")); code != 200 || !strings.Contains(body, `http-equiv="refresh"`) {
		t.Fatalf("ada's sign-in: HTTP %d\n%s", code, body)
	}
	ada := (mcpauth.Principal{Issuer: a.is.URL(), Subject: "ada"}).ID()
	if code, body := e.get(t, "/"); code != 200 || !strings.Contains(body, ada) {
		t.Errorf("signed in: HTTP %d\n%s", code, body)
	}
}
