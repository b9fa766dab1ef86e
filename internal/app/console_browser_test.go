package app_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"ticketrelay/delivery/downstream"
	"ticketrelay/delivery/downstream/downstreamtest"
	"ticketrelay/delivery/downstream/webhook/webhooktest"
	"ticketrelay/internal/app"
	"ticketrelay/internal/app/dispatcher"
	"ticketrelay/request"
	"ticketrelay/testkit/testwait"
	"ticketrelay/ticket"
)

// browserEnv is set by make test-console, which installs Debian's
// chromium: the console is driven by a real headless browser.
const browserEnv = "TICKETRELAY_CONSOLE_BROWSER"

// browser starts a headless Chromium for the test; its console errors
// (exceptions, console.error, the browser log's errors: CSP, network) are
// collected.
type browser struct {
	ctx    context.Context
	mu     sync.Mutex
	errors []string
}

func newBrowser(t *testing.T) *browser {
	t.Helper()
	if os.Getenv(browserEnv) != "1" {
		t.Skip(browserEnv + " is not 1: this test drives a real Chromium (make test-console installs it)")
	}
	path, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatalf("%s=1 but no chromium on PATH: %v", browserEnv, err)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.NoSandbox,
		chromedp.WindowSize(1280, 900), chromedp.Flag("disable-gpu", true))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	b := &browser{ctx: ctx}
	// The first action starts the browser, under the test's context (a
	// timeout here would end the browser with it).
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil {
		cancel()
		cancelAlloc()
		t.Fatalf("start chromium: %v", err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for m, err := range chromedp.Console(ctx) {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleError || m.IsException() {
				b.mu.Lock()
				b.errors = append(b.errors, m.String())
				b.mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() { cancel(); cancelAlloc(); <-done })
	return b
}

// do runs steps with a deadline.
func (b *browser) do(t *testing.T, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// clean fails the test if the pages so far logged an error, and forgets
// them.
func (b *browser) clean(t *testing.T, where string) {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.errors) > 0 {
		t.Errorf("%s: the browser logged errors: %q", where, b.errors)
	}
	b.errors = nil
}

// text is the text of the element sel selects.
func (b *browser) text(t *testing.T, sel string) string {
	t.Helper()
	return value(t, b, "read "+sel, chromedp.Text(chromedp.CSS(sel)))
}

func value[T any](t *testing.T, b *browser, what string, a chromedp.Action[T]) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return v
}

// An operator handed a failed request and an uncertain one settles both
// from the browser, as a person clicks, against a real dispatcher and
// fake webhook receivers; the screenshots in docs/operations.md are
// taken here.
func TestConsoleInBrowser(t *testing.T) {
	b := newBrowser(t)
	keyed := webhooktest.New(t, webhooktest.Options{})
	unkeyed := webhooktest.New(t, webhooktest.Options{})
	cfg := writeFile(t, "config.yaml", fmt.Sprintf(`targets:
  - name: hooks
    kind: webhook
    endpoint: %s
  - name: legacy
    kind: webhook
    endpoint: %s
    options: {receiver_dedupes: false}
tools:
  - {name: file_hook, description: File a ticket through the hook., target: hooks}
  - {name: file_legacy, description: File a ticket through the legacy hook., target: legacy}
`, keyed.URL(), unkeyed.URL()))
	a := newAdminDB(t)
	// The first call of each fails: the keyed receiver's 500 exhausts the
	// one attempt allowed (failed), the unkeyed one's may have created the
	// item (uncertain).
	keyed.Faults.Next(downstreamtest.ServerError)
	unkeyed.Faults.Next(downstreamtest.ServerError)
	for i := range 3 {
		a.request(t, fmt.Sprintf("ok-%d", i), "hooks", string(request.StatusDelivered), 1, "", fmt.Sprintf("ext-%d", i))
	}
	failed := createUnpublished(t, a, "printer-on-fire", "hooks", "Printer on fire in room 4")
	uncertain := createUnpublished(t, a, "vpn-down", "legacy", "VPN down for the night shift")
	data := t.TempDir()
	d := start(t, dispatcher.Run, newEnv(), "-db", a.path, "-data", data, "-config", cfg, "-nats-listen", "127.0.0.1:0",
		"-metrics-listen", "127.0.0.1:0", "-console-listen", "127.0.0.1:0", "-max-attempts", "1")
	waitStatus(t, a, failed, request.StatusFailed)
	waitStatus(t, a, uncertain, request.StatusUncertain)
	base := "http://" + d.addrs["console"]

	// The overview: each target's counts.
	b.do(t, "overview", chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.CSS(`#targets`)))
	if row := b.text(t, `tr[data-target="hooks"]`); !strings.Contains(row, "500") {
		t.Errorf("hooks' row %q does not show the last error", row)
	}
	shot(t, b, "console-overview.png")
	b.clean(t, "overview")

	// Filters: failed requests of hooks, then a text match.
	b.do(t, "filter", chromedp.Navigate(base+"/requests"), chromedp.WaitVisible(chromedp.CSS(`#filters`)),
		chromedp.SetValue(chromedp.CSS(`select[name="status"]`), "failed"),
		chromedp.SendKeys(chromedp.CSS(`input[name="target"]`), "hooks"),
		chromedp.Click(chromedp.CSS(`#filters button`)))
	// The list is on the page the click leaves too: wait for the filtered
	// page's address before reading it.
	testwait.For(t, 30*time.Second, "the filtered page", func() bool {
		return strings.Contains(value(t, b, "location", chromedp.Location()), "status=failed")
	})
	b.do(t, "filtered list", chromedp.WaitVisible(chromedp.CSS(`#requests`)))
	if list := b.text(t, `#requests tbody`); !strings.Contains(list, failed) || strings.Contains(list, "ok-1") || strings.Contains(list, uncertain) {
		t.Errorf("failed of hooks lists %q", list)
	}
	b.do(t, "text filter", chromedp.Navigate(base+"/requests?q=VPN"), chromedp.WaitVisible(chromedp.CSS(`#requests`)))
	if list := b.text(t, `#requests tbody`); !strings.Contains(list, uncertain) || strings.Contains(list, failed) {
		t.Errorf("text VPN lists %q", list)
	}
	b.clean(t, "filters")

	// The failed one, redriven from its page once the receiver works: it
	// reaches the receiver once.
	b.do(t, "open the failed request", chromedp.Navigate(base+"/requests?status=failed"), chromedp.WaitVisible(chromedp.CSS(`#requests`)),
		chromedp.Click(chromedp.CSS(`#requests a[href*="`+failed+`"]`)), chromedp.WaitVisible(chromedp.CSS(`#attempts`)))
	if tl := b.text(t, `#attempts`); !strings.Contains(tl, "HTTP 500") {
		t.Errorf("timeline %q does not show the 500", tl)
	}
	b.do(t, "redrive", chromedp.Click(chromedp.CSS(`#redrive button`)), chromedp.WaitVisible(chromedp.CSS(`#confirm`)))
	if s := b.text(t, `#summary`); !strings.Contains(s, "Redrive 1 failed request") {
		t.Errorf("confirmation says %q", s)
	}
	b.do(t, "confirm", chromedp.Click(chromedp.CSS(`#yes`)), chromedp.WaitVisible(chromedp.CSS(`#done`)))
	waitStatus(t, a, failed, request.StatusDelivered)
	if n := deliveriesOf(keyed, failed); n != 1 {
		t.Errorf("the redriven request reached the receiver %d times, want once", n)
	}
	b.clean(t, "redrive")

	// The uncertain one: the operator found it at the receiver.
	b.do(t, "open the uncertain request", chromedp.Navigate(base+"/"), chromedp.Click(chromedp.CSS(`a[href*="`+uncertain+`"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#resolve`)))
	shot(t, b, "console-request.png")
	b.do(t, "resolve", chromedp.SendKeys(chromedp.CSS(`input[name="external_id"]`), "HOOK-42"),
		chromedp.Click(chromedp.CSS(`#resolve form button`)), chromedp.WaitVisible(chromedp.CSS(`#confirm`)),
		chromedp.Click(chromedp.CSS(`#yes`)), chromedp.WaitVisible(chromedp.CSS(`#done`)))
	if st := a.find(t, uncertain); st.Status != request.StatusDelivered || st.ExternalID != "HOOK-42" {
		t.Errorf("after resolve: %s %q", st.Status, st.ExternalID)
	}
	b.clean(t, "resolve")

	// A form on another site is refused, though the browser holds a
	// session.
	a.request(t, "refused", "hooks", string(request.StatusFailed), 1, "permanent error (HTTP 422): no", "")
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `<!doctype html><form method="post" action="%s/redrive"><input type="hidden" name="id" value="refused">`+
			`<input type="hidden" name="confirm" value="yes"><button id="go">win a prize</button></form>`, base)
	}))
	defer evil.Close()
	b.do(t, "cross-site form", chromedp.Navigate(strings.Replace(evil.URL, "127.0.0.1", "localhost", 1)), chromedp.Click(chromedp.CSS(`#go`)))
	// The answer is a new document: wait for it before reading it.
	var body string
	testwait.For(t, 30*time.Second, "the answer to the cross-site form", func() bool {
		ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
		defer cancel()
		v, err := chromedp.Run(ctx, chromedp.Evaluate[string](
			`location.pathname === "/redrive" && document.readyState === "complete" ? document.body.innerText : ""`))
		body = v
		return err == nil && v != "" // an error: the page is being replaced
	})
	// Refused by the origin check, before the form's token is looked at.
	if !strings.Contains(body, "cross-origin request") {
		t.Errorf("cross-site form answered %q", body)
	}
	if st := a.find(t, "refused"); st.Status != request.StatusFailed {
		t.Errorf("a cross-site form redrove a request: %s", st.Status)
	}
}

// Beyond loopback the console refuses to start without sign-in, and with
// it serves nothing but the sign-in form until an operator signs in.
func TestConsoleSignInInBrowser(t *testing.T) {
	b := newBrowser(t)
	a := newAdminDB(t)
	a.request(t, "secret-request", "local", string(request.StatusFailed), 1, "permanent error (HTTP 422): no", "")
	_, _, err := runOnce(t, dispatcher.Run, newEnv(), "-db", a.path, "-data", t.TempDir(), "-nats-listen", "127.0.0.1:0",
		"-metrics-listen", "127.0.0.1:0", "-console-listen", "0.0.0.0:0")
	if !errors.Is(err, app.ErrUsage) || !strings.Contains(err.Error(), "-console-tokens-file") {
		t.Fatalf("beyond loopback without sign-in: %v, want a usage error naming -console-tokens-file", err)
	}
	tokens := writeFile(t, "operators", "ops-alice:alice-operator-token-0123456789\n")
	d := start(t, dispatcher.Run, newEnv(), "-db", a.path, "-data", t.TempDir(), "-nats-listen", "127.0.0.1:0",
		"-metrics-listen", "127.0.0.1:0", "-console-listen", "0.0.0.0:0", "-console-tokens-file", tokens)
	_, port, _ := strings.Cut(d.addrs["console"], "]:")
	if port == "" {
		_, port, _ = strings.Cut(d.addrs["console"], ":")
	}
	base := "http://127.0.0.1:" + port
	for _, path := range []string{"/", "/requests?status=failed", "/request?id=secret-request"} {
		b.do(t, "GET "+path, chromedp.Navigate(base+path))
		loc, body := value(t, b, "location", chromedp.Location()), b.text(t, `body`)
		if !strings.HasSuffix(loc, "/signin") || strings.Contains(body, "secret-request") {
			t.Errorf("GET %s signed out: at %s showing %q", path, loc, body)
		}
	}
	b.do(t, "sign in", chromedp.SendKeys(chromedp.CSS(`input[name="token"]`), "alice-operator-token-0123456789"),
		chromedp.Submit(chromedp.CSS(`input[name="token"]`)), chromedp.WaitVisible(chromedp.CSS(`#targets`)))
	if who := b.text(t, `.who`); !strings.Contains(who, "ops-alice") {
		t.Errorf("signed in as %q", who)
	}
	b.clean(t, "sign-in")
}

// createUnpublished accepts a request for the relay to publish.
func createUnpublished(t *testing.T, a *adminDB, id, target, title string) string {
	t.Helper()
	req := ticket.Request{RequestID: id, Tool: "create_ticket", Target: target, Title: title, Body: "Reported by the night shift.", Priority: "high"}
	if err := req.Normalize(); err != nil {
		t.Fatal(err)
	}
	if _, err := a.l.Create(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	return id
}

func waitStatus(t *testing.T, a *adminDB, id string, want request.Status) {
	t.Helper()
	testwait.For(t, 30*time.Second, fmt.Sprintf("%s %s", id, want), func() bool { return a.find(t, id).Status == want })
}

// deliveriesOf counts the deliveries the receiver accepted under id's key.
func deliveriesOf(f *webhooktest.Fake, id string) int {
	n := 0
	for _, d := range f.Deliveries() {
		if d.Key == downstream.Key("", id) {
			n++
		}
	}
	return n
}

// shot writes a screenshot of the page to docs/img.
func shot(t *testing.T, b *browser, name string) {
	t.Helper()
	png := value(t, b, "screenshot "+name, chromedp.FullScreenshot(100))
	root, err := filepath.Abs(filepath.Join("..", "..", "docs", "img"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, name), png, 0o644); err != nil {
		t.Fatal(err)
	}
}
