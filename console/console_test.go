package console_test

import (
	"context"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"ticketrelay/console"
	"ticketrelay/front/mcpauth"
	"ticketrelay/internal/operate"
	"ticketrelay/request"
	"ticketrelay/store/ledger"
	"ticketrelay/store/trail"
	"ticketrelay/testkit/fixture"
	"ticketrelay/ticket"
)

// env is a console over a real ledger and its audit trail, in one SQLite
// file in a temporary directory, as the dispatcher wires them.
type env struct {
	l     *ledger.Ledger
	trail *trail.Store
	srv   *httptest.Server
	c     *http.Client
}

func newEnv(t *testing.T, signIn console.SignIn) *env {
	t.Helper()
	return newEnvWith(t, console.Config{SignIn: signIn})
}

// newEnvWith is newEnv with the sign-in of cfg.
func newEnvWith(t *testing.T, cfg console.Config) *env {
	t.Helper()
	l := fixture.NewLedger(t)
	tr, err := trail.Open(context.Background(), l.Path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	e := &env{l: l.Ledger, trail: tr}
	log := fixture.Discard()
	c, err := console.New(console.Config{Store: e.l, Trail: operate.TrailRecorder{Store: tr}, SignIn: cfg.SignIn, OAuth: cfg.OAuth, Log: log, Loopback: true})
	if err != nil {
		t.Fatal(err)
	}
	e.srv = httptest.NewServer(c.Handler())
	t.Cleanup(e.srv.Close)
	jar, _ := cookiejar.New(nil)
	e.c = &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return e
}

// create accepts a request for target and records its delivery state.
func (e *env) create(t *testing.T, id, target, state string) {
	t.Helper()
	ctx := context.Background()
	req := ticket.Request{RequestID: id, Tool: "create_ticket", Target: target, Title: "Disk full on " + id, Body: "df shows 100%", Priority: "high"}
	if err := req.Normalize(); err != nil {
		t.Fatal(err)
	}
	if _, err := e.l.Create(ctx, req); err != nil {
		t.Fatal(err)
	}
	if state == "" {
		return
	}
	d := request.Delivery{RequestID: id, Target: target, State: state, Attempts: 1, LastError: "permanent error (HTTP 422): title refused",
		Attempt: &request.Attempt{At: time.Now(), HTTPStatus: 422, Class: "permanent", Error: "title refused", Latency: 12 * time.Millisecond, Host: "host-a"}}
	if state == string(request.StatusFailed) {
		d.Failure = request.FailureRejected
	}
	if err := e.l.RecordDelivery(ctx, d); err != nil {
		t.Fatal(err)
	}
}

// operators is what the audit trail holds of the operators' actions.
func (e *env) operators(t *testing.T) []trail.Entry {
	t.Helper()
	entries, err := e.trail.Query(context.Background(), trail.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	return slices.DeleteFunc(entries, func(e trail.Entry) bool { return e.Kind != trail.KindOperator })
}

func (e *env) get(t *testing.T, path string) (int, string) {
	t.Helper()
	resp, err := e.c.Get(e.srv.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func (e *env) post(t *testing.T, path string, form url.Values, header http.Header) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, e.srv.URL+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := e.c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

var csrfRE = regexp.MustCompile(`name="csrf" value="([0-9a-f]{64})"`)

// token is the form token of the page at path.
func (e *env) token(t *testing.T, path string) string {
	t.Helper()
	_, body := e.get(t, path)
	m := csrfRE.FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no form token on %s:\n%s", path, body)
	}
	return m[1]
}

func (e *env) status(t *testing.T, id string) request.Report {
	t.Helper()
	st, err := e.l.FindScoped(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func TestPages(t *testing.T) {
	e := newEnv(t, nil)
	e.create(t, "req-failed", "jira", string(request.StatusFailed))
	e.create(t, "req-unsure", "jira", string(request.StatusUncertain))
	e.create(t, "req-waiting", "local", "")

	code, body := e.get(t, "/")
	if code != 200 || !strings.Contains(body, `data-target="jira"`) || !strings.Contains(body, "title refused") || !strings.Contains(body, "req-unsure") {
		t.Errorf("overview %d:\n%s", code, body)
	}
	code, body = e.get(t, "/requests?status=failed")
	if code != 200 || !strings.Contains(body, `data-id="req-failed"`) || strings.Contains(body, `data-id="req-unsure"`) {
		t.Errorf("failed list %d:\n%s", code, body)
	}
	code, body = e.get(t, "/requests?q="+url.QueryEscape("on req-waiting"))
	if code != 200 || !strings.Contains(body, `data-id="req-waiting"`) || strings.Contains(body, `data-id="req-failed"`) {
		t.Errorf("text filter %d:\n%s", code, body)
	}
	// The fingerprint filter: the form keeps it, the list holds the
	// fingerprint's requests only.
	fp := ticket.Request{RequestID: "req-fp", Tool: "create_ticket", Target: "local", Title: "Checkout 500", Body: "again", Priority: "high",
		Fingerprint: "checkout-500"}
	if err := fp.Normalize(); err != nil {
		t.Fatal(err)
	}
	if _, err := e.l.Create(context.Background(), fp); err != nil {
		t.Fatal(err)
	}
	code, body = e.get(t, "/requests?fingerprint=checkout-500")
	if code != 200 || !strings.Contains(body, `data-id="req-fp"`) || strings.Contains(body, `data-id="req-waiting"`) ||
		!strings.Contains(body, `name="fingerprint" value="checkout-500"`) {
		t.Errorf("fingerprint filter %d:\n%s", code, body)
	}
	if code, body = e.get(t, "/requests?q="+url.QueryEscape("--")); code != 400 || !strings.Contains(body, "text: neither a request id nor words") {
		t.Errorf("a text of no words %d:\n%s", code, body)
	}
	if code, body = e.get(t, "/requests?from=yesterday"); code != 400 || !strings.Contains(body, "from: want a date") {
		t.Errorf("bad time %d:\n%s", code, body)
	}
	code, body = e.get(t, "/request?id=req-failed")
	// The detail is find_request's: a content refusal asks for a new request_id.
	if code != 200 || !strings.Contains(body, "422") || !strings.Contains(body, "host-a") || !strings.Contains(body, "Disk full on req-failed") ||
		!strings.Contains(body, "NEW request_id") || !strings.Contains(body, `action="/redrive"`) {
		t.Errorf("request page %d:\n%s", code, body)
	}
	if code, _ = e.get(t, "/request?id=never"); code != 404 {
		t.Errorf("unknown request: %d, want 404", code)
	}
	if code, body = e.get(t, "/static/console.css"); code != 200 || !strings.Contains(body, "body") {
		t.Errorf("stylesheet %d", code)
	}
}

// A delivered request's URL is a link when a browser can open it, and
// text otherwise: the local target's file:// URL is not blanked.
func TestExternalURLShown(t *testing.T) {
	e := newEnv(t, nil)
	for id, u := range map[string]string{"req-web": "https://tickets.example/browse/OPS-1", "req-file": "file:///var/lib/ticketrelay/tickets.jsonl#L7"} {
		e.create(t, id, "local", "")
		if err := e.l.RecordDelivery(context.Background(), request.Delivery{RequestID: id, Target: "local",
			State: string(request.StatusDelivered), Attempts: 1, ExternalID: "7", ExternalURL: u}); err != nil {
			t.Fatal(err)
		}
	}
	if _, body := e.get(t, "/request?id=req-web"); !strings.Contains(body, `<a href="https://tickets.example/browse/OPS-1"`) {
		t.Errorf("an https URL is not a link:\n%s", body)
	}
	if _, body := e.get(t, "/request?id=req-file"); !strings.Contains(body, `<code id="external-url">file:///var/lib/ticketrelay/tickets.jsonl#L7</code>`) ||
		strings.Contains(body, "ZgotmplZ") {
		t.Errorf("a file URL is not shown as text:\n%s", body)
	}
}

// A redrive shows the selection first; only the confirmation runs it,
// and the trail names who did it.
func TestRedriveConfirmedAndRecorded(t *testing.T) {
	e := newEnv(t, nil)
	e.create(t, "req-a", "jira", string(request.StatusFailed))
	e.create(t, "req-b", "github", string(request.StatusFailed))
	e.create(t, "req-ok", "jira", string(request.StatusDelivered))
	tok := e.token(t, "/requests?status=failed")

	code, body := e.post(t, "/redrive", url.Values{"csrf": {tok}, "id": {"req-a", "req-b", "req-ok"}}, nil)
	if code != 200 || !strings.Contains(body, `<b id="count">2</b>`) || !strings.Contains(body, "<td>github</td><td>1</td>") ||
		!strings.Contains(body, "req-ok</code> is delivered") {
		t.Fatalf("confirmation %d:\n%s", code, body)
	}
	if st := e.status(t, "req-a"); st.Status != request.StatusFailed {
		t.Fatalf("redriven before the confirmation: %s", st.Status)
	}
	code, body = e.post(t, "/redrive", url.Values{"csrf": {tok}, "id": {"req-a", "req-b"}, "confirm": {"yes"}}, nil)
	if code != 200 || !strings.Contains(body, "Redriven: 2") {
		t.Fatalf("redrive %d:\n%s", code, body)
	}
	for _, id := range []string{"req-a", "req-b"} {
		if st := e.status(t, id); st.Status != request.StatusRetrying {
			t.Errorf("%s is %s after the redrive, want retrying", id, st.Status)
		}
	}
	if got := e.operators(t); len(got) != 2 || got[0].Subject != "console (no sign-in)" || got[0].Action != operate.ActionRedrive ||
		got[0].Outcome != trail.Done || got[0].RequestID != "req-a" || got[1].RequestID != "req-b" {
		t.Errorf("trail %+v", got)
	}
	// Every failed request of a target: the count comes from the ledger.
	e.create(t, "req-c", "jira", string(request.StatusFailed))
	code, body = e.post(t, "/redrive", url.Values{"csrf": {tok}, "all": {"yes"}, "target": {"jira"}}, nil)
	if code != 200 || !strings.Contains(body, `<b id="count">1</b>`) {
		t.Fatalf("confirmation of all %d:\n%s", code, body)
	}
	code, body = e.post(t, "/redrive", url.Values{"csrf": {tok}, "all": {"yes"}, "target": {"nope"}, "confirm": {"yes"}}, nil)
	if code != 409 || !strings.Contains(body, "no delivery record for target") {
		t.Errorf("unknown target %d:\n%s", code, body)
	}
}

// Forms from elsewhere do nothing: another site's (the browser says so),
// and one without this session's token.
func TestCrossSiteRefused(t *testing.T) {
	e := newEnv(t, nil)
	e.create(t, "req-a", "jira", string(request.StatusFailed))
	tok := e.token(t, "/requests?status=failed")
	form := url.Values{"csrf": {tok}, "id": {"req-a"}, "confirm": {"yes"}}
	for name, h := range map[string]http.Header{
		"cross-site":   {"Sec-Fetch-Site": {"cross-site"}},
		"other origin": {"Origin": {"https://evil.example"}},
	} {
		if code, _ := e.post(t, "/redrive", form, h); code != 403 {
			t.Errorf("%s: %d, want 403", name, code)
		}
	}
	if code, _ := e.post(t, "/redrive", url.Values{"csrf": {strings.Repeat("0", 64)}, "id": {"req-a"}, "confirm": {"yes"}}, nil); code != 403 {
		t.Errorf("wrong token: %d, want 403", code)
	}
	// DNS rebinding: a page of another name that resolves to loopback.
	req, _ := http.NewRequest(http.MethodGet, e.srv.URL+"/requests?status=failed", nil)
	req.Host = "evil.example:80"
	if resp, err := e.c.Do(req); err != nil || resp.StatusCode != 403 {
		t.Errorf("a foreign Host on loopback: %v %v, want 403", resp.StatusCode, err)
	} else {
		resp.Body.Close()
	}
	if st, got := e.status(t, "req-a"), e.operators(t); st.Status != request.StatusFailed || len(got) != 0 {
		t.Errorf("a refused form changed %s to %s (trail %v)", "req-a", st.Status, got)
	}
}

func TestResolve(t *testing.T) {
	e := newEnv(t, nil)
	e.create(t, "req-u", "jira", string(request.StatusUncertain))
	e.create(t, "req-v", "jira", string(request.StatusUncertain))
	tok := e.token(t, "/request?id=req-u")
	if code, body := e.post(t, "/resolve", url.Values{"csrf": {tok}, "id": {"req-u"}, "outcome": {"delivered"}}, nil); code != 400 ||
		!strings.Contains(body, "give the id") {
		t.Errorf("delivered without an id %d:\n%s", code, body)
	}
	form := url.Values{"csrf": {tok}, "id": {"req-u"}, "outcome": {"delivered"}, "external_id": {"JIRA-7"}}
	if code, body := e.post(t, "/resolve", form, nil); code != 200 || !strings.Contains(body, "JIRA-7") {
		t.Fatalf("confirmation %d:\n%s", code, body)
	}
	form.Set("confirm", "yes")
	if code, body := e.post(t, "/resolve", form, nil); code != 200 || !strings.Contains(body, "Settled: 1") {
		t.Fatalf("resolve %d:\n%s", code, body)
	}
	if st := e.status(t, "req-u"); st.Status != request.StatusDelivered || st.ExternalID != "JIRA-7" {
		t.Errorf("after resolve: %+v", st)
	}
	// Not there: settled, then sent again with the same key.
	form = url.Values{"csrf": {tok}, "id": {"req-v"}, "outcome": {"redrive"}, "confirm": {"yes"}}
	if code, body := e.post(t, "/resolve", form, nil); code != 200 {
		t.Fatalf("resolve and redrive %d:\n%s", code, body)
	}
	if st := e.status(t, "req-v"); st.Status != request.StatusRetrying {
		t.Errorf("after resolve and redrive: %s, want retrying", st.Status)
	}
	// Twice: the second is refused by the ledger's rules, and says why.
	if code, body := e.post(t, "/resolve", form, nil); code != 409 || !strings.Contains(body, "only uncertain requests") {
		t.Errorf("second resolve %d:\n%s", code, body)
	}
	_, body := e.get(t, "/request?id=req-v")
	if !strings.Contains(body, "resolve") || !strings.Contains(body, "redrive") || !strings.Contains(body, `id="trail"`) {
		t.Errorf("trail not shown on the request's page:\n%s", body)
	}
}

// With sign-in nothing but the form is served to a stranger; an
// operator's token opens a session, whose actions carry their name.
func TestSignIn(t *testing.T) {
	tokens, err := mcpauth.ParseTokens("test", "alice:alice-operator-token-0123456789")
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, console.Tokens(tokens))
	e.create(t, "req-a", "jira", string(request.StatusFailed))
	for _, path := range []string{"/", "/requests?status=failed", "/request?id=req-a"} {
		code, body := e.get(t, path)
		if code != http.StatusSeeOther || strings.Contains(body, "req-a") {
			t.Errorf("GET %s without sign-in: %d, want a redirect to the form and nothing else", path, code)
		}
	}
	if code, _ := e.post(t, "/redrive", url.Values{"id": {"req-a"}, "confirm": {"yes"}}, nil); code != 401 {
		t.Errorf("POST without sign-in: %d, want 401", code)
	}
	if code, body := e.post(t, "/signin", url.Values{"token": {"not-the-token-0123456789"}}, nil); code != 401 || !strings.Contains(body, "not an operator") {
		t.Errorf("wrong token: %d\n%s", code, body)
	}
	if code, _ := e.get(t, "/"); code != http.StatusSeeOther {
		t.Errorf("after a wrong token: %d, want still signed out", code)
	}
	req, _ := http.NewRequest(http.MethodPost, e.srv.URL+"/signin", strings.NewReader("token=alice-operator-token-0123456789"))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := e.c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	ck := resp.Header.Get("Set-Cookie")
	if resp.StatusCode != http.StatusSeeOther || !strings.Contains(ck, "HttpOnly") || !strings.Contains(ck, "SameSite=Strict") {
		t.Fatalf("sign-in: %d, cookie %q", resp.StatusCode, ck)
	}
	code, body := e.get(t, "/")
	if code != 200 || !strings.Contains(body, "alice") {
		t.Fatalf("signed in: %d\n%s", code, body)
	}
	tok := e.token(t, "/request?id=req-a")
	if code, _ := e.post(t, "/redrive", url.Values{"csrf": {tok}, "id": {"req-a"}, "confirm": {"yes"}}, nil); code != 200 {
		t.Fatalf("redrive signed in: %d", code)
	}
	if got := e.operators(t); len(got) != 1 || got[0].Subject != "alice" || got[0].Action != operate.ActionRedrive || got[0].Outcome != trail.Done {
		t.Errorf("trail %+v, want alice's redrive", got)
	}
	if code, _ := e.post(t, "/signout", url.Values{"csrf": {tok}}, nil); code != http.StatusSeeOther {
		t.Errorf("sign out: %d", code)
	}
	if code, _ := e.get(t, "/"); code != http.StatusSeeOther {
		t.Errorf("after sign-out: %d, want the form again", code)
	}
}
