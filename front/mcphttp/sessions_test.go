package mcphttp

import (
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// counter counts the words a Refused or Evicted callback is given.
type counter struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *counter) add(w string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[w]++
}

// String is the counts, read under the lock (for failure messages).
func (c *counter) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return fmt.Sprint(c.n)
}

func (c *counter) get(w string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[w]
}

// clientFrom is an HTTP client whose connections come from the loopback
// address ip (127.0.0.2: another client address on this host).
func clientFrom(t *testing.T, ip string) *http.Client {
	t.Helper()
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	tr := &http.Transport{DialContext: d.DialContext}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// TestUnusedSessionsGoFirst: a client that loops on initialize never gets
// a refusal nor fills the table: each new session takes the slot of the
// oldest one that made no call, and a session that made calls is never
// touched. Once every session made calls, the next one is refused (503).
func TestUnusedSessionsGoFirst(t *testing.T) {
	e := newTenv(t)
	var evicted, refused counter
	ts, h := e.serve(t, Config{MaxSessions: 3, MaxSessionsPerAddress: -1, Evicted: evicted.add, Refused: refused.add})
	long := &wire{t: t, url: ts.URL}
	long.use()
	const flood = 30
	var flooders []*wire
	for i := range flood {
		c := &wire{t: t, url: ts.URL}
		resp := c.do(c.req(http.MethodPost, initBody()))
		if resp.StatusCode != http.StatusOK {
			resp.Body.Close()
			t.Fatalf("initialize %d of the flood: HTTP %d, want 200 (an unused session makes room)", i, resp.StatusCode)
		}
		readResponse(t, resp)
		c.session, c.version = resp.Header.Get("Mcp-Session-Id"), SessionProtocol
		flooders = append(flooders, c)
	}
	waitFor(t, 5*time.Second, "the evicted sessions to end", func() bool { return liveSessions(e.srv) == 3 })
	if n := h.Sessions(); n != 3 {
		t.Errorf("%d sessions counted, want 3", n)
	}
	if got := evicted.get(EvictedTableFull); got != flood-2 {
		t.Errorf("Evicted(%s) %d times, want %d", EvictedTableFull, got, flood-2)
	}
	if !long.ping() {
		t.Error("the session that made calls did not survive the flood")
	}
	resp := flooders[0].do(flooders[0].req(http.MethodPost, []byte(`{"jsonrpc":"2.0","id":1,"method":"ping"}`)))
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("the first, evicted session: HTTP %d, want 404", resp.StatusCode)
	}
	// The two newest made calls: now no session is unused.
	for _, c := range flooders[flood-2:] {
		if !c.ping() {
			t.Fatal("a session of the flood that kept its slot does not answer")
		}
	}
	c := &wire{t: t, url: ts.URL}
	resp = c.do(c.req(http.MethodPost, initBody()))
	if resp.StatusCode != http.StatusServiceUnavailable {
		resp.Body.Close()
		t.Fatalf("every session made calls: HTTP %d, want 503", resp.StatusCode)
	}
	if _, msg := nullIDError(t, "table full", resp); !strings.Contains(msg, "every one of them in use") {
		t.Errorf("refusal says %q", msg)
	}
	if refused.get(RefusedSessionLimit) != 1 || evicted.get(EvictedTableFull) != flood-2 {
		t.Errorf("refused %v, evicted %v", &refused, &evicted)
	}
}

// TestUnusedSessionTimeout: a session that makes no call within
// UnusedSessionTimeout is closed; one that made a call outlives it.
func TestUnusedSessionTimeout(t *testing.T) {
	e := newTenv(t)
	var evicted counter
	const unused = 300 * time.Millisecond
	ts, h := e.serve(t, Config{UnusedSessionTimeout: unused, Evicted: evicted.add})
	long := &wire{t: t, url: ts.URL}
	long.use()
	opened := time.Now()
	idle := &wire{t: t, url: ts.URL}
	idle.initialize()
	// The eviction is counted just after the session closes: wait for both.
	waitFor(t, 10*time.Second, "the unused session to be closed", func() bool {
		return liveSessions(e.srv) == 1 && h.Sessions() == 1 && evicted.get(EvictedUnusedTimeout) >= 1
	})
	if d := time.Since(opened); d < unused {
		t.Errorf("closed after %s, before the %s timeout", d, unused)
	}
	if n := evicted.get(EvictedUnusedTimeout); n != 1 {
		t.Errorf("evicted %d for %s, want one", n, EvictedUnusedTimeout)
	}
	if !long.ping() {
		t.Error("the session that made a call was closed too")
	}
	resp := idle.do(idle.req(http.MethodPost, []byte(`{"jsonrpc":"2.0","id":1,"method":"ping"}`)))
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("the closed session: HTTP %d, want 404", resp.StatusCode)
	}
}

// TestSessionsPerAddress: without tokens, one address holds at most
// MaxSessionsPerAddress sessions: its flood of initialize only churns its
// own unused sessions, and once its sessions all made calls it is refused
// (429) while another address opens sessions freely.
func TestSessionsPerAddress(t *testing.T) {
	e := newTenv(t)
	var evicted, refused counter
	ts, h := e.serve(t, Config{MaxSessions: 10, MaxSessionsPerAddress: 2, Evicted: evicted.add, Refused: refused.add})
	a1 := &wire{t: t, url: ts.URL}
	a1.use()
	for range 5 {
		(&wire{t: t, url: ts.URL}).initialize()
	}
	waitFor(t, 5*time.Second, "the address's evicted sessions to end", func() bool { return liveSessions(e.srv) == 2 })
	if got := evicted.get(EvictedClientFull); got != 4 {
		t.Errorf("Evicted(%s) %d times, want 4", EvictedClientFull, got)
	}
	a2 := &wire{t: t, url: ts.URL}
	a2.use()
	c := &wire{t: t, url: ts.URL}
	resp := c.do(c.req(http.MethodPost, initBody()))
	if resp.StatusCode != http.StatusTooManyRequests {
		resp.Body.Close()
		t.Fatalf("third session of 127.0.0.1 with both in use: HTTP %d, want 429", resp.StatusCode)
	}
	if _, msg := nullIDError(t, "address full", resp); !strings.Contains(msg, "address 127.0.0.1 holds its maximum of 2") {
		t.Errorf("refusal says %q", msg)
	}
	if refused.get(RefusedClientSessionLimit) != 1 {
		t.Errorf("refused %v, want one %s", &refused, RefusedClientSessionLimit)
	}
	other := clientFrom(t, "127.0.0.2")
	for range 2 {
		b := &wire{t: t, url: ts.URL, client: other}
		b.use()
	}
	if n := h.Sessions(); n != 4 {
		t.Errorf("%d sessions, want 4", n)
	}
	if !a1.ping() || !a2.ping() {
		t.Error("a session that made calls was closed")
	}
}
