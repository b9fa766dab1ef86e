package multihost_test

import (
	"html"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"ticketrelay/testkit/testwait"
	"ticketrelay/ticket"
)

// consoleClient browses one host's operator console (loopback, no
// sign-in), keeping its session cookie.
type consoleClient struct {
	base string
	c    *http.Client
}

func newConsoleClient(t *testing.T, h *host) *consoleClient {
	t.Helper()
	addr := h.disp.Addr("console")
	if addr == "" {
		t.Fatalf("dispatcher %s announces no console address", h.name)
	}
	jar, _ := cookiejar.New(nil)
	return &consoleClient{base: "http://" + addr, c: &http.Client{Jar: jar, Timeout: 20 * time.Second}}
}

func (cc *consoleClient) get(t *testing.T, path string) (int, string) {
	t.Helper()
	res, err := cc.c.Get(cc.base + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, html.UnescapeString(string(b))
}

func (cc *consoleClient) post(t *testing.T, path string, form url.Values) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, cc.base+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", cc.base)
	res, err := cc.c.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, html.UnescapeString(string(b))
}

var csrfField = regexp.MustCompile(`name="csrf" value="([0-9a-f]{64})"`)

// Any host's console shows the whole installation: a request accepted on
// host a is in host b's list, with a as its holder, and has a page on b
// with its delivery, its attempts (with the host that made each) and the
// audit entry of the call a took; an action on it from b's console sends
// the operator to a's console, whose address b reads from the cluster
// record. Without the cluster copy b's list is empty and its page unknown.
func TestConsoleShowsTheWholeInstallation(t *testing.T) {
	in := newInstallation(t)
	a := in.startHost(t, "a", "-console-listen", "127.0.0.1:0")
	b := in.startHost(t, "b", "-console-listen", "127.0.0.1:0")
	ca, cb := newConsoleClient(t, a), newConsoleClient(t, b)

	first := a.mustCall(t, "send_hook", args("console-1", "Checkout fails, seen from b"))
	a.waitStatus(t, "console-1", "delivered", 30*time.Second)
	id := ticket.ScopedID("", "console-1")

	var list string
	if !testwait.Until(30*time.Second, func() bool {
		code, body := cb.get(t, "/requests?status=delivered&q=seen+from+b")
		list = body
		return code == http.StatusOK && strings.Contains(body, `data-id="`+id+`" data-status="delivered"`)
	}) {
		t.Fatalf("host b's console does not list host a's request as delivered:\n%s", list)
	}
	if !strings.Contains(list, "Every host's requests") || !strings.Contains(list, "Checkout fails, seen from b") {
		t.Fatalf("host b's list does not say it is the installation's, or lacks the title:\n%s", list)
	}

	// b's overview counts the installation's requests: a's delivered one,
	// though b's own ledger holds none.
	var overview string
	if !testwait.Until(30*time.Second, func() bool {
		_, overview = cb.get(t, "/")
		return countOf(overview, "delivered", "hook") == "1"
	}) {
		t.Fatalf("host b's overview does not count host a's delivered request on hook:\n%s", overview)
	}
	if !strings.Contains(overview, "Every host's requests") {
		t.Errorf("host b's overview does not say its counts are every host's:\n%s", overview)
	}

	var page string
	if !testwait.Until(30*time.Second, func() bool {
		code, body := cb.get(t, "/request?id="+url.QueryEscape(id))
		page = body
		return code == http.StatusOK && regexp.MustCompile(`(?s)id="trail">.*send_hook — accepted`).MatchString(body)
	}) {
		t.Fatalf("host b's page of the request does not show a's audit entry of the call:\n%s", page)
	}
	for _, want := range []string{`id="status">delivered`, first.TicketID, "Checkout fails, seen from b", `id="holder">`,
		"held by host ", "act on its console, " + ca.base, "attempt 1 on "} {
		if !strings.Contains(page, want) {
			t.Errorf("host b's page of a's request does not show %q:\n%s", want, page)
		}
	}
	if strings.Contains(page, `action="/resolve"`) || strings.Contains(page, `id="redrive"`) {
		t.Errorf("host b's page offers actions on a request host a holds:\n%s", page)
	}

	// An action posted on b for a's request: refused, naming a's console.
	m := csrfField.FindStringSubmatch(list)
	if m == nil {
		t.Fatalf("no form token on b's list:\n%s", list)
	}
	code, body := cb.post(t, "/resolve", url.Values{"csrf": {m[1]}, "id": {id}, "outcome": {"failed"}})
	if code != http.StatusConflict || !strings.Contains(body, "act on its console, "+ca.base) {
		t.Errorf("resolve of a's request on b: %d, want 409 naming a's console:\n%s", code, body)
	}

	// a's own console: the same request, held here, no pointer elsewhere.
	code, own := ca.get(t, "/request?id="+url.QueryEscape(id))
	if code != http.StatusOK || strings.Contains(own, "held by host ") || !strings.Contains(own, `id="status">delivered`) {
		t.Errorf("host a's page of its own request: %d\n%s", code, own)
	}
}

// countOf is the count of status the overview shows for target; "" if
// it shows none.
func countOf(overview, status, target string) string {
	m := regexp.MustCompile(`(?s)data-target="` + regexp.QuoteMeta(target) + `">.*?status=` + status + `&target=` + regexp.QuoteMeta(target) + `">(\d+)</a>`).FindStringSubmatch(overview)
	if m == nil {
		return ""
	}
	return m[1]
}
