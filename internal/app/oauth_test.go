package app_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"ticketrelay/front/mcpauth/mcpauthtest"
	"ticketrelay/internal/app"
	"ticketrelay/internal/app/front"
)

// bearerRT adds an access token to every request.
type bearerRT struct{ token string }

func (b bearerRT) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

// TestFrontOAuth: with -oauth-issuer, mcp-front serves the protected-
// resource metadata naming the issuer and the scope, challenges a request
// without a token toward it, files a signed-in user's ticket, counts the
// validations and exports the keys it holds.
func TestFrontOAuth(t *testing.T) {
	is := mcpauthtest.NewIssuer(t)
	listen := freePort(t)
	resource := "http://" + listen + "/mcp"
	r := start(t, front.Run, newEnv("TICKETRELAY_OAUTH_ISSUER", is.URL()), "-listen", listen, "-metrics-listen", "127.0.0.1:0",
		"-auth-resource", resource, "-oauth-scopes", "tickets", "-create-db", "-db", filepath.Join(t.TempDir(), "t.db"))
	metricsAddr := r.addrs["metrics"]
	if v := scrapeValue(t, metricsAddr, `ticketrelay_oauth_jwks_keys`); v != 1 {
		t.Errorf("keys held after startup: %v, want 1 (fetched before serving)", v)
	}

	resp, err := http.Get("http://" + listen + "/.well-known/oauth-protected-resource/mcp")
	if err != nil {
		t.Fatal(err)
	}
	var md struct {
		Resource             string   `json:"resource"`
		AuthorizationServers []string `json:"authorization_servers"`
		ScopesSupported      []string `json:"scopes_supported"`
	}
	json.NewDecoder(resp.Body).Decode(&md)
	resp.Body.Close()
	if md.Resource != resource || strings.Join(md.AuthorizationServers, ",") != is.URL() || strings.Join(md.ScopesSupported, ",") != "tickets" {
		t.Errorf("metadata %+v", md)
	}

	resp, err = http.Post(resource, "application/json", strings.NewReader(limitsInit))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if c := resp.Header.Get("WWW-Authenticate"); resp.StatusCode != http.StatusUnauthorized ||
		!strings.Contains(c, `resource_metadata="http://`+listen+`/.well-known/oauth-protected-resource/mcp"`) || !strings.Contains(c, `scope="tickets"`) {
		t.Errorf("without a token: HTTP %d, WWW-Authenticate %q", resp.StatusCode, c)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	token := is.Mint(is.Claims("ada", resource, time.Now()))
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "oauth-test", Version: "0"}, nil).
		Connect(ctx, &mcp.StreamableClientTransport{Endpoint: resource, HTTPClient: &http.Client{Transport: bearerRT{token}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "create_ticket", Arguments: map[string]any{"request_id": "r-1", "title": "Printer on fire"}})
	if err != nil || res.IsError {
		t.Fatalf("create_ticket as a signed-in user: %v %+v", err, res)
	}
	if v := scrapeValue(t, metricsAddr, `ticketrelay_oauth_token_validations_total{outcome="ok"}`); v < 1 {
		t.Errorf("ok validations %v", v)
	}
	if v := scrapeValue(t, metricsAddr, `ticketrelay_oauth_token_validations_total{outcome="expired"}`); v != 0 {
		t.Errorf("expired validations %v", v)
	}
}

// TestFrontOAuthConfigErrors: a wrong -oauth-* setting stops mcp-front
// with a usage error naming it, before any ledger is created.
func TestFrontOAuthConfigErrors(t *testing.T) {
	secret := writeFile(t, "secret", "\n")
	for name, args := range map[string][]string{
		"no resource":         {"-oauth-issuer", "https://idp.example"},
		"HS256":               {"-oauth-issuer", "https://idp.example", "-auth-resource", "https://t.example/mcp", "-oauth-algorithms", "HS256"},
		"client id alone":     {"-oauth-issuer", "https://idp.example", "-auth-resource", "https://t.example/mcp", "-oauth-client-id", "x"},
		"empty secret":        {"-oauth-issuer", "https://idp.example", "-auth-resource", "https://t.example/mcp", "-oauth-client-id", "x", "-oauth-client-secret-file", secret},
		"issuer not a URL":    {"-oauth-issuer", "idp.example", "-auth-resource", "https://t.example/mcp"},
		"leeway over 5m":      {"-oauth-issuer", "https://idp.example", "-auth-resource", "https://t.example/mcp", "-oauth-leeway", "1h"},
		"scopes without auth": {"-oauth-scopes", "tickets"},
	} {
		db := filepath.Join(t.TempDir(), "t.db")
		_, stderr, err := runOnce(t, front.Run, newEnv(), append([]string{"-listen", "127.0.0.1:0", "-db", db, "-create-db"}, args...)...)
		if !errors.Is(err, app.ErrUsage) || !strings.Contains(err.Error(), "oauth") && !strings.Contains(err.Error(), "-auth-resource") {
			t.Errorf("%s: %v\n%s", name, err, stderr)
		}
		if _, err := os.Stat(db); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: the ledger was created", name)
		}
	}
}
