// Package console is the operator's console in the browser: the
// overview of every target (and, with several hosts, of the installation),
// the requests by status, one request's attempts, and the operator
// actions (redrive, resolve, forget a host) through the same functions as
// the dispatcher's commands (package operate). Pages are server-rendered
// HTML that works without JavaScript; every action is a same-origin POST
// carrying the session's CSRF token, and runs only once confirmed.
package console

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"ticketrelay/delivery/forwarder"
	"ticketrelay/front/mcpauth"
	"ticketrelay/internal/operate"
	"ticketrelay/request"
	"ticketrelay/store/ledger"
	"ticketrelay/store/trail"
)

// Store is what the console reads and changes of the ledger.
type Store interface {
	operate.Store
	Counts(ctx context.Context) (ledger.Summary, error)
	ListRequests(ctx context.Context, f ledger.RequestFilter) (ledger.RequestPage, error)
	FindScoped(ctx context.Context, id string) (request.Report, error)
	PriorDelivery(ctx context.Context, id string) (request.Prior, error)
	Attempts(ctx context.Context, id string) ([]request.Attempt, error)
	LastErrors(ctx context.Context, targets []string) (map[string]ledger.LastError, error)
}

var _ Store = (*ledger.Ledger)(nil)

// Trail is the audit trail: each action is recorded with who took it, and
// a request's page lists its entries (the calls that named it, and the
// operators' actions on it).
type Trail interface {
	operate.Recorder
	ForRequest(ctx context.Context, scopedID string) ([]trail.Entry, error)
}

// SignIn checks the credential an operator gives the sign-in form and
// names them. Without it and without OAuth there is no sign-in: a console
// on loopback (or -insecure).
type SignIn interface {
	Check(ctx context.Context, credential string) (subject string, err error)
}

// ErrNotOperator is SignIn.Check's answer to a credential that is not an
// operator's.
var ErrNotOperator = errors.New("not an operator's credential")

// Config is what the console shows and acts on. Only Store is required.
type Config struct {
	Store Store
	// Live is each target's forwarder now (in-flight limit, pause,
	// deliveries); nil: not shown.
	Live func() []forwarder.TargetLive
	// Cluster is the installation's view with several hosts; nil: one host.
	Cluster func(ctx context.Context) *operate.ClusterView
	// Whole is the whole installation with several hosts: the lists and a
	// request's page show every host's requests; nil: this host's ledger.
	Whole *Whole
	// Hosts forgets a finished host; nil: one host.
	Hosts operate.HostForgetter
	// Trail records the actions and lists a request's; nil: neither.
	Trail Trail
	// Trace is the link to a request's trace; nil or "": none.
	Trace  func(scopedID string) string
	SignIn SignIn
	// OAuth signs operators in at an authorization server; nil: not.
	OAuth *OAuth
	// Loopback: the console listens on loopback only, and answers only
	// requests that name a loopback host: a page whose name an attacker
	// pointed at 127.0.0.1 (DNS rebinding) is same-origin with itself.
	Loopback bool
	// Anonymous names the operator when there is no sign-in.
	Anonymous string
	Log       *slog.Logger
	Now       func() time.Time
}

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Console serves the pages; Run samples the delivery rates.
type Console struct {
	cfg   Config
	pages map[string]*template.Template
	key   []byte // signs the CSRF tokens
	rates rates

	mu       sync.Mutex
	sessions map[string]session // signed-in operators, by session id
}

type session struct {
	subject string
	expires time.Time
}

// sessionTTL is how long a sign-in lasts.
const sessionTTL = 12 * time.Hour

// maxSessions bounds the signed-in sessions kept; the oldest go first.
const maxSessions = 1000

// New makes the console of cfg.
func New(cfg Config) (*Console, error) {
	if cfg.Store == nil {
		return nil, errors.New("console: no store")
	}
	if o := cfg.OAuth; o != nil && (o.Validator == nil || o.Endpoints == nil || o.ClientID == "" || o.RedirectURL == "" || o.Scope == "") {
		return nil, errors.New("console: OAuth sign-in needs the issuer's endpoints, a client id, a redirect URL, the operator scope and a validator")
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Anonymous == "" {
		cfg.Anonymous = "console (no sign-in)"
	}
	c := &Console{cfg: cfg, key: make([]byte, 32), sessions: map[string]session{}, pages: map[string]*template.Template{}}
	rand.Read(c.key)
	for _, page := range []string{"overview", "requests", "request", "confirm", "done", "signin", "signedin"} {
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/"+page+".html")
		if err != nil {
			return nil, fmt.Errorf("console: template %s: %w", page, err)
		}
		c.pages[page] = t
	}
	return c, nil
}

// Handler serves the console. Unsafe methods from another origin are
// refused before anything (http.CrossOriginProtection: Sec-Fetch-Site,
// else Origin against Host), and every form also carries the session's
// token.
func (c *Console) Handler() http.Handler {
	mux := http.NewServeMux()
	static, _ := fs.Sub(staticFS, "static")
	mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	mux.HandleFunc("GET /{$}", c.overview)
	mux.HandleFunc("GET /requests", c.requests)
	mux.HandleFunc("GET /request", c.request)
	mux.HandleFunc("POST /redrive", c.redrive)
	mux.HandleFunc("POST /resolve", c.resolve)
	mux.HandleFunc("POST /forget-host", c.forgetHost)
	mux.HandleFunc("GET /signin", c.signinForm)
	mux.HandleFunc("POST /signin", c.signin)
	mux.HandleFunc("POST /signout", c.signout)
	mux.HandleFunc("GET /oauth/start", c.oauthStart)
	mux.HandleFunc("GET /oauth/callback", c.oauthCallback)
	cop := http.NewCrossOriginProtection()
	cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "refused: a form of this console must be sent from its own pages (cross-origin request)", http.StatusForbidden)
	}))
	h := securityHeaders(cop.Handler(c.withSession(mux)))
	if c.cfg.Loopback {
		h = loopbackHost(h)
	}
	return h
}

// loopbackHost refuses a request whose Host is not a loopback name.
func loopbackHost(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host := r.Host
		if hh, _, err := net.SplitHostPort(host); err == nil {
			host = hh
		}
		host = strings.Trim(host, "[]")
		if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
			http.Error(w, "refused: this console answers on a loopback address only (127.0.0.1, ::1 or localhost)", http.StatusForbidden)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// securityHeaders: no framing, no scripts, nothing from elsewhere.
func securityHeaders(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hd := w.Header()
		hd.Set("Content-Security-Policy", "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
		hd.Set("X-Content-Type-Options", "nosniff")
		hd.Set("Referrer-Policy", "no-referrer")
		hd.Set("Cache-Control", "no-store")
		h.ServeHTTP(w, r)
	})
}

const cookieName = "ticketrelay_console"

type ctxKey struct{}

// who is the request's operator and session.
type who struct {
	subject string
	sid     string
}

// withSession finds the request's session. With sign-in, a request
// without one gets only the sign-in form and the stylesheet; without, an
// anonymous session is made so that forms carry a token all the same.
// An unsafe method must carry the session's token.
func (c *Console) withSession(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		open := r.URL.Path == "/signin" || strings.HasPrefix(r.URL.Path, "/static/") || strings.HasPrefix(r.URL.Path, "/oauth/")
		signIn := c.signInRequired()
		var u who
		if ck, err := r.Cookie(cookieName); err == nil && len(ck.Value) == 64 {
			u.sid = ck.Value
			if !signIn {
				u.subject = c.cfg.Anonymous
			} else if s, ok := c.session(ck.Value); ok {
				u.subject = s.subject
			}
		}
		switch {
		case u.subject != "":
		case !signIn:
			u = who{subject: c.cfg.Anonymous, sid: newID()}
			c.setCookie(w, r, u.sid, 0)
		case !open:
			if r.Method == http.MethodGet || r.Method == http.MethodHead {
				http.Redirect(w, r, "/signin", http.StatusSeeOther)
				return
			}
			http.Error(w, "sign in first", http.StatusUnauthorized)
			return
		}
		if r.Method == http.MethodPost && r.URL.Path != "/signin" {
			r.Body = http.MaxBytesReader(w, r.Body, 1<<20)
			if err := r.ParseForm(); err != nil || !hmac.Equal([]byte(r.PostForm.Get("csrf")), []byte(c.csrf(u.sid))) {
				http.Error(w, "refused: the form's token does not match this session (reload the page and try again)", http.StatusForbidden)
				return
			}
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), ctxKey{}, u)))
	})
}

// signInRequired: operators sign in, with a token or at the issuer.
func (c *Console) signInRequired() bool { return c.cfg.SignIn != nil || c.cfg.OAuth != nil }

func operator(r *http.Request) who {
	u, _ := r.Context().Value(ctxKey{}).(who)
	return u
}

func (c *Console) session(id string) (session, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s, ok := c.sessions[id]
	if ok && c.cfg.Now().After(s.expires) {
		delete(c.sessions, id)
		return session{}, false
	}
	return s, ok
}

func (c *Console) setCookie(w http.ResponseWriter, r *http.Request, value string, maxAge int) {
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: value, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode,
		Secure: r.TLS != nil, MaxAge: maxAge})
}

// csrf is the token of session sid.
func (c *Console) csrf(sid string) string {
	m := hmac.New(sha256.New, c.key)
	m.Write([]byte("csrf:" + sid))
	return hex.EncodeToString(m.Sum(nil))
}

func newID() string {
	b := make([]byte, 32)
	rand.Read(b)
	return hex.EncodeToString(b)
}

func (c *Console) signinForm(w http.ResponseWriter, r *http.Request) {
	if !c.signInRequired() {
		http.Redirect(w, r, "/", http.StatusSeeOther)
		return
	}
	c.render(w, r, "signin", map[string]any{})
}

// signin takes the operator's credential from the form: a session starts
// under a new id (never one the browser brought), or the form comes back.
func (c *Console) signin(w http.ResponseWriter, r *http.Request) {
	if c.cfg.SignIn == nil {
		http.Redirect(w, r, "/", http.StatusSeeOther)
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 8<<10)
	if err := r.ParseForm(); err != nil {
		http.Error(w, "bad form", http.StatusBadRequest)
		return
	}
	subject, err := c.cfg.SignIn.Check(r.Context(), r.PostForm.Get("token"))
	if err != nil {
		c.cfg.Log.Warn("console: sign-in refused", "remote", r.RemoteAddr, "err", err)
		w.WriteHeader(http.StatusUnauthorized)
		c.render(w, r, "signin", map[string]any{"Error": "That is not an operator's token."})
		return
	}
	c.startSession(w, r, subject)
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

// startSession signs subject in under a new session id (never one the
// browser brought).
func (c *Console) startSession(w http.ResponseWriter, r *http.Request, subject string) {
	id := newID()
	c.mu.Lock()
	if len(c.sessions) >= maxSessions {
		var oldest string
		for k, s := range c.sessions {
			if oldest == "" || s.expires.Before(c.sessions[oldest].expires) {
				oldest = k
			}
		}
		delete(c.sessions, oldest)
	}
	c.sessions[id] = session{subject: subject, expires: c.cfg.Now().Add(sessionTTL)}
	c.mu.Unlock()
	c.cfg.Log.Info("console: operator signed in", "subject", subject, "remote", r.RemoteAddr)
	c.setCookie(w, r, id, int(sessionTTL/time.Second))
}

func (c *Console) signout(w http.ResponseWriter, r *http.Request) {
	u := operator(r)
	c.mu.Lock()
	delete(c.sessions, u.sid)
	c.mu.Unlock()
	c.setCookie(w, r, "", -1)
	http.Redirect(w, r, "/signin", http.StatusSeeOther)
}

// render writes page with data, and what every page shows: the operator
// and the form token.
func (c *Console) render(w http.ResponseWriter, r *http.Request, page string, data map[string]any) {
	u := operator(r)
	data["Operator"] = u.subject
	data["SignedIn"] = c.signInRequired() && u.subject != ""
	data["Tokens"] = c.cfg.SignIn != nil
	if c.cfg.OAuth != nil {
		data["Issuer"] = c.cfg.OAuth.Issuer
	}
	data["CSRF"] = c.csrf(u.sid)
	data["Now"] = c.cfg.Now().UTC()
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	if err := c.pages[page].Execute(w, data); err != nil {
		c.cfg.Log.Warn("console: page", "page", page, "err", err)
	}
}

// fail answers a page that could not be made.
func (c *Console) fail(w http.ResponseWriter, err error) {
	c.cfg.Log.Warn("console: page failed", "err", err)
	http.Error(w, "the console could not read the ledger: "+err.Error(), http.StatusInternalServerError)
}

// Tokens signs operators in with static tokens (a tokens file of the
// same form as mcp-front's): every token in it is an operator's.
func Tokens(t *mcpauth.Tokens) SignIn { return tokenSignIn{t} }

type tokenSignIn struct{ t *mcpauth.Tokens }

func (s tokenSignIn) Check(_ context.Context, credential string) (string, error) {
	if subject, ok := s.t.Verify(credential); ok {
		return subject, nil
	}
	return "", ErrNotOperator
}
