package app_test

// One client flooding initialize must not lock the others out.

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"ticketrelay/internal/app/front"
	"ticketrelay/testkit/testwait"
)

// mcpClient speaks 2025-11-25 streamable HTTP to mcp-front from one
// loopback address, with one bearer token (or none).
type mcpClient struct {
	t       *testing.T
	hc      *http.Client
	url     string
	token   string
	session string
}

// newClient connects from the loopback address ip.
func newClient(t *testing.T, url, ip, token string) *mcpClient {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	tr := &http.Transport{DialContext: d.DialContext, MaxIdleConnsPerHost: 8}
	t.Cleanup(tr.CloseIdleConnections)
	return &mcpClient{t: t, hc: &http.Client{Transport: tr, Timeout: 20 * time.Second}, url: url, token: token}
}

// post sends one message and returns the status and the whole answer (a
// call's event stream ends after its response).
func (c *mcpClient) post(body string) (int, string, http.Header, error) {
	req, err := http.NewRequest(http.MethodPost, c.url, strings.NewReader(body))
	if err != nil {
		return 0, "", nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	if c.session != "" {
		req.Header.Set("Mcp-Session-Id", c.session)
		req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return 0, "", nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header, err
}

// open opens a session: initialize, then notifications/initialized.
func (c *mcpClient) open() {
	c.t.Helper()
	status, body, h, err := c.post(limitsInit)
	if err != nil || status != http.StatusOK || h.Get("Mcp-Session-Id") == "" {
		c.t.Fatalf("initialize: HTTP %d %s %v", status, body, err)
	}
	c.session = h.Get("Mcp-Session-Id")
	if status, body, _, err := c.post(`{"jsonrpc":"2.0","method":"notifications/initialized"}`); err != nil || status != http.StatusAccepted {
		c.t.Fatalf("notifications/initialized: HTTP %d %s %v", status, body, err)
	}
}

// create calls create_ticket on the session and fails t unless a ticket
// was queued.
func (c *mcpClient) create(requestID string) {
	c.t.Helper()
	status, body, _, err := c.post(fmt.Sprintf(`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"create_ticket","arguments":{"request_id":%q,"title":"flood test"}}}`, requestID))
	if err != nil || status != http.StatusOK || !strings.Contains(body, `"status":"queued"`) {
		c.t.Fatalf("create_ticket %s on session %s: HTTP %d %s %v", requestID, c.session, status, body, err)
	}
}

// flood sends n initialize requests from c's address, from workers
// goroutines at once, and reports how many were answered with a session.
// started is closed once a quarter of them are done.
func flood(c *mcpClient, n, workers int, started chan<- struct{}) (opened int) {
	var (
		mu   sync.Mutex
		done int
		once sync.Once
		wg   sync.WaitGroup
	)
	next := make(chan struct{}, n)
	for range n {
		next <- struct{}{}
	}
	close(next)
	for range workers {
		wg.Go(func() {
			for range next {
				status, _, h, err := c.post(limitsInit)
				mu.Lock()
				done++
				if err == nil && status == http.StatusOK && h.Get("Mcp-Session-Id") != "" {
					opened++
				}
				if done >= n/4 {
					once.Do(func() { close(started) })
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return opened
}

// TestFrontInitializeFlood: a client at 127.0.0.1 sends 400 initialize
// requests, 4 at a time, and never makes a call. Meanwhile a client at
// 127.0.0.2 opens a session and files a ticket, and a client at 127.0.0.1
// whose session made calls before the flood files another after it: the
// flood only churned its own unused sessions (its address's share is 10),
// and no one was refused. Then the same with bearer tokens, where the
// share is the subject's: mallory floods, alice (from the same address)
// keeps her session, bob opens one.
func TestFrontInitializeFlood(t *testing.T) {
	const (
		n       = 400
		workers = 4
		share   = 10
	)
	t.Run("by address", func(t *testing.T) {
		r := start(t, front.Run, newEnv(), "-listen", "127.0.0.1:0", "-metrics-listen", "127.0.0.1:0", "-create-db", "-db", filepath.Join(t.TempDir(), "t.db"),
			"-max-sessions", "50", "-max-sessions-per-address", fmt.Sprint(share))
		url, metrics := "http://"+r.addrs["mcp"]+"/mcp", r.addrs["metrics"]
		long := newClient(t, url, "127.0.0.1", "")
		long.open()
		long.create("flood-long-1")

		started := make(chan struct{})
		opened := make(chan int, 1)
		go func() { opened <- flood(newClient(t, url, "127.0.0.1", ""), n, workers, started) }()
		select {
		case <-started:
		case <-time.After(60 * time.Second):
			t.Fatal("the flood did not get a quarter through in 60s")
		}
		other := newClient(t, url, "127.0.0.2", "")
		other.open()
		other.create("flood-other-1")
		if got := <-opened; got != n {
			t.Errorf("%d of the flood's %d initialize requests opened a session, want all: an unused one makes room", got, n)
		}
		long.create("flood-long-2")
		other.create("flood-other-2")

		// 127.0.0.1 holds its share: the session that made calls and the 9
		// newest of the flood; each of the other 391 initialize requests
		// closed the oldest unused session of its address.
		testwait.For(t, 10*time.Second, "ticketrelay_http_sessions to settle at 11", func() bool {
			return scrapeValue(t, metrics, "ticketrelay_http_sessions") == share+1
		})
		if v := scrapeValue(t, metrics, `ticketrelay_http_sessions_evicted_total{reason="client_full"}`); v != n-(share-1) {
			t.Errorf(`evicted{client_full} %v, want %d`, v, n-(share-1))
		}
		for _, reason := range []string{"table_full", "unused_timeout"} {
			if v := scrapeValue(t, metrics, `ticketrelay_http_sessions_evicted_total{reason="`+reason+`"}`); v != 0 {
				t.Errorf("evicted{%s} %v, want 0", reason, v)
			}
		}
		if strings.Contains(r.stderr.String(), "new session refused") {
			t.Errorf("a session was refused:\n%s", r.stderr)
		}
	})

	t.Run("by subject", func(t *testing.T) {
		const (
			alice   = "alice-0123456789abcdef0123456789"
			bob     = "bob-0123456789abcdef0123456789ab"
			mallory = "mallory-0123456789abcdef01234567"
		)
		env := newEnv("TICKETRELAY_AUTH_TOKENS", "alice:"+alice+",bob:"+bob+",mallory:"+mallory)
		r := start(t, front.Run, env, "-listen", "127.0.0.1:0", "-metrics-listen", "127.0.0.1:0", "-create-db", "-db", filepath.Join(t.TempDir(), "t.db"),
			"-max-sessions", "50", "-max-sessions-per-subject", fmt.Sprint(share), "-max-sessions-per-address", "1")
		url, metrics := "http://"+r.addrs["mcp"]+"/mcp", r.addrs["metrics"]
		long := newClient(t, url, "127.0.0.1", alice)
		long.open()
		long.create("flood-alice-1")

		started := make(chan struct{})
		opened := make(chan int, 1)
		go func() { opened <- flood(newClient(t, url, "127.0.0.1", mallory), n, workers, started) }()
		<-started
		newcomer := newClient(t, url, "127.0.0.1", bob)
		newcomer.open()
		newcomer.create("flood-bob-1")
		if got := <-opened; got != n {
			t.Errorf("%d of the flood's %d initialize requests opened a session, want all", got, n)
		}
		long.create("flood-alice-2")
		newcomer.create("flood-bob-2")
		testwait.For(t, 10*time.Second, "ticketrelay_http_sessions to settle at 12", func() bool {
			return scrapeValue(t, metrics, "ticketrelay_http_sessions") == share+2
		})
		if v := scrapeValue(t, metrics, `ticketrelay_http_sessions_evicted_total{reason="client_full"}`); v != n-share {
			t.Errorf(`evicted{client_full} %v, want %d`, v, n-share)
		}
	})
}

// TestFrontUnusedSessionTimeout: -session-unused-timeout closes a session
// that made no call, and counts it; a session that made calls outlives it.
func TestFrontUnusedSessionTimeout(t *testing.T) {
	r := start(t, front.Run, newEnv("TICKETRELAY_SESSION_UNUSED_TIMEOUT", "300ms"), "-listen", "127.0.0.1:0", "-metrics-listen", "127.0.0.1:0",
		"-create-db", "-db", filepath.Join(t.TempDir(), "t.db"))
	url, metrics := "http://"+r.addrs["mcp"]+"/mcp", r.addrs["metrics"]
	long := newClient(t, url, "127.0.0.1", "")
	long.open()
	long.create("unused-long-1")
	idle := newClient(t, url, "127.0.0.1", "")
	idle.open()
	opened := time.Now()
	testwait.For(t, 10*time.Second, "the unused session to be closed", func() bool {
		return scrapeValue(t, metrics, `ticketrelay_http_sessions_evicted_total{reason="unused_timeout"}`) == 1
	})
	if d := time.Since(opened); d < 300*time.Millisecond {
		t.Errorf("closed %s after it opened, before the timeout", d)
	}
	if v := scrapeValue(t, metrics, "ticketrelay_http_sessions"); v != 1 {
		t.Errorf("ticketrelay_http_sessions %v, want 1", v)
	}
	long.create("unused-long-2")
	if status, body, _, _ := idle.post(`{"jsonrpc":"2.0","id":1,"method":"ping"}`); status != http.StatusNotFound {
		t.Errorf("the closed session: HTTP %d %s, want 404", status, body)
	}
}
