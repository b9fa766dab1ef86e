package oauth_test

import (
	"context"
	"database/sql"
	"errors"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"ticketrelay/front/mcpauth"
	"ticketrelay/internal/app"
	"ticketrelay/internal/app/dispatcher"
	"ticketrelay/request"
	"ticketrelay/store/ledger"
	"ticketrelay/testkit/fixture"
	"ticketrelay/testkit/testio"
	"ticketrelay/testkit/testwait"
	"ticketrelay/ticket"
)

// TestConsoleOAuthWithHydra: the console, beyond loopback with only OAuth
// sign-in, sends an operator to Hydra and back (authorization code with
// PKCE, the console a confidential client); the operator granted the
// operator scope redrives a failed request, recorded in the trail under
// their name; a user not granted it is refused and sees nothing; a
// callback this browser did not start is refused.
func TestConsoleOAuthWithHydra(t *testing.T) {
	listen := freeAddr(t)
	base := "http://" + listen
	h := startHydra(t, base) // the console's URL is its audience
	h.withheld = map[string]string{"mallory": dispatcher.DefaultOperatorScope}
	var client struct {
		ID     string `json:"client_id"`
		Secret string `json:"client_secret"`
	}
	if err := h.adminSend(http.MethodPost, "/admin/clients", map[string]any{
		"client_name": "ticketrelay console", "redirect_uris": []string{base + "/oauth/callback"},
		"grant_types": []string{"authorization_code"}, "response_types": []string{"code"},
		"scope": dispatcher.DefaultOperatorScope, "token_endpoint_auth_method": "client_secret_basic",
	}, &client); err != nil || client.ID == "" || client.Secret == "" {
		t.Fatalf("register the console at hydra: %v %+v", err, client)
	}
	secretFile := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secretFile, []byte(client.Secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	dbPath := filepath.Join(t.TempDir(), "tickets.db")
	l := failedRequest(t, dbPath, "printer-on-fire")
	stderr := runDispatcher(t, "-db", dbPath, "-data", t.TempDir(), "-nats-listen", "127.0.0.1:0", "-metrics-listen", "",
		"-console-listen", "0.0.0.0:"+strings.Split(listen, ":")[1], "-console-url", base,
		"-console-oauth-issuer", h.issuer, "-console-oauth-client-id", client.ID, "-console-oauth-client-secret-file", secretFile)

	// Signed out: the sign-in page, with the issuer's link and no token form.
	ada := newOperatorBrowser(t)
	at, body := ada.get(t, base+"/request?id=printer-on-fire")
	if at.Path != "/signin" || !strings.Contains(body, `href="/oauth/start"`) || strings.Contains(body, `name="token"`) || strings.Contains(body, "printer-on-fire") {
		t.Fatalf("signed out: at %s showing %q", at, body)
	}
	// A callback this browser did not start: none under way, then one
	// under way (sent to the issuer, not back yet) with another state.
	if code := ada.status(t, base+"/oauth/callback?state=guessed&code=stolen"); code != http.StatusUnauthorized {
		t.Errorf("a callback with no sign-in under way: HTTP %d, want 401", code)
	}
	noFollow := &http.Client{Jar: ada.c.Jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := noFollow.Get(base + "/oauth/start")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if to := resp.Header.Get("Location"); resp.StatusCode != http.StatusSeeOther || !strings.Contains(to, "code_challenge_method=S256") ||
		!strings.Contains(to, "scope="+url.QueryEscape(dispatcher.DefaultOperatorScope)) {
		t.Errorf("sign-in start: HTTP %d to %q, want the issuer with a PKCE challenge and the operator scope", resp.StatusCode, to)
	}

	// Ada signs in at the issuer; her browser is stopped on its way back to
	// the callback, which is first sent another state (login CSRF), then
	// hers.
	h.signIn("ada")
	toCallback := &http.Client{Jar: ada.c.Jar, CheckRedirect: func(req *http.Request, _ []*http.Request) error {
		if strings.HasPrefix(req.URL.String(), base+"/oauth/callback") {
			return http.ErrUseLastResponse
		}
		return nil
	}}
	resp, err = toCallback.Get(base + "/oauth/start")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	callback, err := url.Parse(resp.Header.Get("Location"))
	if err != nil || callback.Query().Get("code") == "" || callback.Query().Get("state") == "" {
		t.Fatalf("the issuer sent ada back to %q (HTTP %d), want the callback with a code and the state", resp.Header.Get("Location"), resp.StatusCode)
	}
	forged := *callback
	q := forged.Query()
	q.Set("state", "guessed")
	forged.RawQuery = q.Encode()
	if code := ada.status(t, forged.String()); code != http.StatusUnauthorized {
		t.Errorf("a callback with another state than this browser's: HTTP %d, want 401", code)
	}
	// The callback's page moves on to the overview by itself (a refresh
	// from the console's own page, which carries the session cookie).
	_, body = ada.get(t, callback.String())
	if !strings.Contains(body, `<meta http-equiv="refresh" content="0; url=/">`) {
		t.Errorf("the callback's page does not move on to the overview: %q", body)
	}
	operatorID := (mcpauth.Principal{Issuer: h.issuer, Subject: "ada"}).ID()
	if at, body = ada.get(t, base+"/"); at.Path != "/" || !strings.Contains(body, operatorID) {
		t.Fatalf("ada signed in: at %s showing %q\ndispatcher:\n%s", at, body, stderr)
	}
	_, page := ada.get(t, base+"/request?id=printer-on-fire")
	csrf := regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`).FindStringSubmatch(page)
	if csrf == nil {
		t.Fatalf("the request's page holds no form token: %q", page)
	}
	if _, done := ada.post(t, base+"/redrive", url.Values{"csrf": {csrf[1]}, "id": {"printer-on-fire"}, "confirm": {"yes"}}); !strings.Contains(done, `id="done"`) {
		t.Fatalf("redrive answered %q", done)
	}
	testwait.For(t, 30*time.Second, "the redriven request delivered", func() bool {
		st, err := l.Find(context.Background(), "", "printer-on-fire")
		return err == nil && st.Status == request.StatusDelivered
	})
	if _, page := ada.get(t, base+"/request?id=printer-on-fire"); !strings.Contains(page, "operator "+operatorID+": redrive") {
		t.Errorf("the request's audit entries do not name ada's redrive: %q", page)
	}

	// Mallory signs in at the issuer, but is not granted the operator scope.
	h.signIn("mallory")
	mallory := newOperatorBrowser(t)
	refused := mallory.do(t, http.MethodGet, base+"/oauth/start", nil)
	if refused.code != http.StatusUnauthorized || !strings.Contains(refused.body, "operator scope") {
		t.Errorf("mallory without the scope: HTTP %d %q", refused.code, refused.body)
	}
	if at, body := mallory.get(t, base+"/"); at.Path != "/signin" || strings.Contains(body, "printer-on-fire") {
		t.Errorf("mallory after a refused sign-in: at %s showing %q", at, body)
	}
}

// operatorBrowser is a cookie-keeping client that follows redirects, as a
// person's operatorBrowser does.
type operatorBrowser struct{ c *http.Client }

func newOperatorBrowser(t *testing.T) *operatorBrowser {
	jar, _ := cookiejar.New(nil)
	return &operatorBrowser{&http.Client{Jar: jar, Timeout: 60 * time.Second}}
}

type answer struct {
	at   *url.URL
	code int
	body string
}

func (b *operatorBrowser) do(t *testing.T, method, u string, form url.Values) answer {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, _ := http.NewRequest(method, u, body)
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	resp, err := b.c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, u, err)
	}
	defer resp.Body.Close()
	s, _ := io.ReadAll(resp.Body)
	return answer{at: resp.Request.URL, code: resp.StatusCode, body: string(s)}
}

// get fetches u, which must end in a 200.
func (b *operatorBrowser) get(t *testing.T, u string) (*url.URL, string) {
	t.Helper()
	a := b.do(t, http.MethodGet, u, nil)
	if a.code != http.StatusOK {
		t.Fatalf("GET %s: HTTP %d at %s: %s", u, a.code, a.at, a.body)
	}
	return a.at, a.body
}

func (b *operatorBrowser) post(t *testing.T, u string, form url.Values) (*url.URL, string) {
	t.Helper()
	a := b.do(t, http.MethodPost, u, form)
	if a.code != http.StatusOK {
		t.Fatalf("POST %s: HTTP %d at %s: %s", u, a.code, a.at, a.body)
	}
	return a.at, a.body
}

func (b *operatorBrowser) status(t *testing.T, u string) int {
	return b.do(t, http.MethodGet, u, nil).code
}

// failedRequest makes the ledger at path with one request of the local
// target whose delivery failed, as the relay and forwarder would leave it.
func failedRequest(t *testing.T, path, id string) *ledger.Ledger {
	t.Helper()
	ctx := context.Background()
	f := fixture.NewLedger(t, fixture.At(path))
	l, w := f.Ledger, f.Writer
	req := ticket.Request{RequestID: id, Tool: "create_ticket", Target: "local", Title: "Printer on fire", Body: "Room 4."}
	if err := req.Normalize(); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Create(ctx, req); err != nil {
		t.Fatal(err)
	}
	if err := w.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `UPDATE outbox SET published_at = ? WHERE request_id = ?`, time.Now().UnixNano(), id)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if err := l.RecordDelivery(ctx, request.Delivery{RequestID: id, Target: "local", State: string(request.StatusFailed), Attempts: 1,
		LastError: "permanent error (HTTP 422): no"}); err != nil {
		t.Fatal(err)
	}
	return l
}

// runDispatcher runs the dispatcher in-process until the test ends.
func runDispatcher(t *testing.T, args ...string) *testio.Buffer {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	stderr := &testio.Buffer{}
	ready, done := make(chan struct{}), make(chan error, 1)
	go func() {
		done <- dispatcher.Run(ctx, app.Env{Args: args, Stdin: strings.NewReader(""), Stdout: io.Discard, Stderr: stderr,
			Lookup: func(string) (string, bool) { return "", false }, Ready: func(map[string]string) { close(ready) }})
	}()
	select {
	case <-ready:
	case err := <-done:
		cancel()
		t.Fatalf("dispatcher exited: %v\n%s", err, stderr)
	case <-time.After(30 * time.Second):
		cancel()
		t.Fatalf("dispatcher not serving after 30 s\n%s", stderr)
	}
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("dispatcher: %v\n%s", err, stderr)
		}
	})
	return stderr
}
