package bench

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"ticketrelay/testkit/e2eproc"
)

// signInScenario is issue 34's figures: what validating a signed-in user's
// JWT and recording the audit trail cost create_ticket.
const signInScenario = 10

// issuer is an OAuth authorization server as far as mcp-front asks one:
// its metadata and its JWKS, served from this process, with an RS256 key
// (the usual default of identity providers) that signs the sessions'
// access tokens.
type issuer struct {
	srv *httptest.Server
	key *rsa.PrivateKey
}

func newIssuer() (*issuer, error) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	is := &issuer{key: key}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/oauth-authorization-server", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"issuer": is.srv.URL, "jwks_uri": is.srv.URL + "/jwks",
			"authorization_endpoint": is.srv.URL + "/authorize", "token_endpoint": is.srv.URL + "/token",
			"response_types_supported": []string{"code"}})
	})
	mux.HandleFunc("GET /jwks", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/jwk-set+json")
		json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{
			{Key: &key.PublicKey, KeyID: "bench", Algorithm: string(jose.RS256), Use: "sig"}}})
	})
	is.srv = httptest.NewServer(mux)
	return is, nil
}

// token is an access token for sub meant for audience, valid for a day.
func (is *issuer) token(sub, audience string) (string, error) {
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: jose.JSONWebKey{Key: is.key, KeyID: "bench"}},
		(&jose.SignerOptions{}).WithType("at+jwt"))
	if err != nil {
		return "", err
	}
	now := time.Now()
	return jwt.Signed(s).Claims(map[string]any{"iss": is.srv.URL, "sub": sub, "aud": []string{audience}, "client_id": "bench",
		"iat": now.Unix(), "nbf": now.Unix(), "exp": now.Add(24 * time.Hour).Unix(), "scope": "tickets"}).Serialize()
}

// scenario10 measures create_ticket at n sessions on three mcp-fronts side
// by side, alternated round by round: static bearer tokens with the audit
// trail on (the default), signed-in users' JWTs validated against the
// issuer's JWKS with the trail on, and static tokens with -audit=false.
// Every session is its own subject on each.
func (r *runner) scenario10(ctx context.Context, n int) error {
	is, err := newIssuer()
	if err != nil {
		return err
	}
	defer is.srv.Close()
	var entries []string
	static := make([]string, n)
	for i := range static {
		b := make([]byte, 16)
		rand.Read(b)
		static[i] = hex.EncodeToString(b)
		entries = append(entries, fmt.Sprintf("agent-%d:%s", i, static[i]))
	}
	tokensEnv := "TICKETRELAY_AUTH_TOKENS=" + strings.Join(entries, ",")
	start := func(name, addr string, extra []string, env ...string) (*proc, error) {
		sub, err := r.mkdir(filepath.Join("s10", name))
		if err != nil {
			return nil, err
		}
		args := append([]string{"-create-db", "-db", filepath.Join(sub, "tickets.db"), "-listen", addr, "-metrics-listen", "127.0.0.1:0"},
			r.cfg.FrontArgs...)
		return startProc(ctx, name, r.bin("mcp-front"), sub, append(args, extra...),
			append(append([]string(nil), r.cfg.FrontEnv...), env...), "mcp", "metrics")
	}
	withTrail, err := start("mcp-front-static", "127.0.0.1:0", nil, tokensEnv)
	if err != nil {
		return err
	}
	defer withTrail.stop()
	noTrail, err := start("mcp-front-no-trail", "127.0.0.1:0", []string{"-audit=false"}, tokensEnv)
	if err != nil {
		return err
	}
	defer noTrail.stop()
	// The audience of the access tokens is the endpoint's URL: its port is
	// chosen before it starts.
	addr, err := e2eproc.FreeAddr()
	if err != nil {
		return err
	}
	resource := "http://" + addr + "/mcp"
	signedIn, err := start("mcp-front-jwt", addr, []string{"-oauth-issuer", is.srv.URL, "-auth-resource", resource})
	if err != nil {
		return err
	}
	defer signedIn.stop()

	jwts := make([]string, n)
	for i := range jwts {
		if jwts[i], err = is.token(fmt.Sprintf("user-%d", i), resource); err != nil {
			return err
		}
	}
	fronts := []struct {
		p      *proc
		tokens []string
		s      *sessions
		o      *outcome
	}{{p: withTrail, tokens: static}, {p: signedIn, tokens: jwts}, {p: noTrail, tokens: static}}
	for i := range fronts {
		f := &fronts[i]
		if f.s, err = connectAs(ctx, f.p.mcpURL(), r.cfg.Protocol, n, func(i int) string { return f.tokens[i] }); err != nil {
			return err
		}
		defer f.s.close()
		if err := r.warm(ctx, f.s, createTool); err != nil {
			return err
		}
		f.o = &outcome{}
	}
	for range r.cfg.Rounds {
		for _, f := range fronts {
			o, err := f.s.run(ctx, r.timed(createTool, &freshSource{}, f.p))
			if err != nil {
				return err
			}
			f.o.merge(o)
		}
	}
	static0, jwt0, off := fronts[0].o, fronts[1].o, fronts[2].o
	row10 := func(what, settings string, figure, base *outcome, baseName string) {
		rt := ratio(figure.throughput(), base.throughput())
		result := verdict(rt >= 0.95)
		if figure.errors+base.errors > 0 {
			result = "ERR"
		}
		r.rep.add(row{"10", what, settings, perSec(figure.throughput()), perSec(base.throughput()) + " " + baseName, times(rt), "≥ 0.95×", result})
	}
	row10(fmt.Sprintf("create_ticket with JWT validation, %d sessions", n),
		fmt.Sprintf("%d signed-in users, RS256 access tokens checked against the issuer's JWKS (cached), audit trail on; %s", n, r.rounds()),
		jwt0, static0, "static tokens")
	row10(fmt.Sprintf("create_ticket with the audit trail on, %d sessions", n),
		fmt.Sprintf("%d static-token subjects; an entry per call, written in batches beside the ledger; %s", n, r.rounds()),
		static0, off, "-audit=false")
	r.rep.detail("%s", describe(fmt.Sprintf("10 create_ticket @%d, static tokens, trail on", n), static0, "mcp-front"))
	r.rep.detail("%s", describe(fmt.Sprintf("10 create_ticket @%d, JWTs, trail on", n), jwt0, "mcp-front"))
	r.rep.detail("%s", describe(fmt.Sprintf("10 create_ticket @%d, static tokens, trail off", n), off, "mcp-front"))
	for _, f := range fronts {
		f.s.close()
	}
	return stopAll(withTrail, signedIn, noTrail)
}
