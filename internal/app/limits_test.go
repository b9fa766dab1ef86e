package app_test

// Limits of the HTTP servers against an abusive client: idle connections,
// header size, connections at once, sessions, failed authentication.

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"ticketrelay/internal/app"
	"ticketrelay/internal/app/dispatcher"
	"ticketrelay/internal/app/front"
	"ticketrelay/testkit/testwait"
)

// rawGet sends a GET on conn and reads its answer.
func rawGet(t *testing.T, conn net.Conn, r *bufio.Reader, host, path string, header ...string) *http.Response {
	t.Helper()
	fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: %s\r\n%s\r\n", path, host, strings.Join(header, ""))
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

func dial(t *testing.T, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn, bufio.NewReader(conn)
}

// closedWithin reports whether the server closed conn within d.
func closedWithin(conn net.Conn, r *bufio.Reader, d time.Duration) bool {
	conn.SetReadDeadline(time.Now().Add(d))
	_, err := r.ReadByte()
	var ne net.Error
	return err != nil && !(errors.As(err, &ne) && ne.Timeout())
}

// TestServeLimits: an idle keep-alive connection is closed after the idle
// timeout, but a response silent for longer than that (an SSE stream, a call
// waiting for delivery) is not cut: there is no write or whole-request
// timeout. Headers over 64 KiB get 431.
func TestServeLimits(t *testing.T) {
	const idle = 300 * time.Millisecond
	mux := http.NewServeMux()
	mux.HandleFunc("/plain", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok\n") })
	mux.HandleFunc("/sse", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		http.NewResponseController(w).Flush()
		select {
		case <-time.After(4 * idle): // silent for longer than the idle timeout
		case <-r.Context().Done():
			return
		}
		io.WriteString(w, "data: still here\n\n")
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := app.ServeLimits(ctx, "127.0.0.1:0", mux, slog.New(slog.DiscardHandler), app.HTTPLimits{Idle: idle})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Shutdown(time.Second) })
	if app.ServerOf(s).WriteTimeout != 0 || app.ServerOf(s).ReadTimeout != 0 || app.ServerOf(s).IdleTimeout != idle || app.ServerOf(s).MaxHeaderBytes != 64<<10 {
		t.Errorf("server timeouts: write %s, read %s, idle %s, max header bytes %d", app.ServerOf(s).WriteTimeout, app.ServerOf(s).ReadTimeout, app.ServerOf(s).IdleTimeout, app.ServerOf(s).MaxHeaderBytes)
	}
	if d, err := app.Serve(ctx, "127.0.0.1:0", mux, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	} else {
		if app.ServerOf(d).IdleTimeout != app.HTTPIdleTimeout || app.HTTPIdleTimeout < 2*time.Minute || app.ServerOf(d).MaxHeaderBytes != app.HTTPMaxHeaderBytes || app.ServerOf(d).WriteTimeout != 0 {
			t.Errorf("default server: idle %s, max header bytes %d, write timeout %s", app.ServerOf(d).IdleTimeout, app.ServerOf(d).MaxHeaderBytes, app.ServerOf(d).WriteTimeout)
		}
		d.Shutdown(time.Second)
	}

	conn, r := dial(t, s.Addr)
	if resp := rawGet(t, conn, r, s.Addr, "/plain"); resp.StatusCode != http.StatusOK {
		t.Fatalf("/plain: HTTP %d", resp.StatusCode)
	}
	if !closedWithin(conn, r, 10*idle) {
		t.Error("an idle keep-alive connection stays open past the idle timeout")
	}

	conn, r = dial(t, s.Addr)
	fmt.Fprintf(conn, "GET /sse HTTP/1.1\r\nHost: %s\r\n\r\n", s.Addr)
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, len("data: still here"))
	start := time.Now()
	if _, err := io.ReadFull(resp.Body, b); err != nil || string(b) != "data: still here" {
		t.Errorf("an SSE stream silent for %s was cut: %q, %v", 4*idle, b, err)
	} else if time.Since(start) < 3*idle {
		t.Errorf("the event came after %s, before the silence ended", time.Since(start))
	}

	conn, r = dial(t, s.Addr)
	if resp := rawGet(t, conn, r, s.Addr, "/plain", "X-Big: "+strings.Repeat("a", 100<<10)+"\r\n"); resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("100 KiB of headers: HTTP %d, want 431", resp.StatusCode)
	}
}

// TestFrontMaxConns: with -max-conns 2, a third connection is not served
// while two are open, and is served as soon as one closes. mcp-front's
// headers are bounded (431 for a 100 KiB Mcp-Session-Id).
func TestFrontMaxConns(t *testing.T) {
	r := start(t, front.Run, newEnv(), "-listen", "127.0.0.1:0", "-metrics-listen", "", "-create-db", "-db", filepath.Join(t.TempDir(), "t.db"), "-max-conns", "2")
	addr := r.addrs["mcp"]
	c1, r1 := dial(t, addr)
	c2, r2 := dial(t, addr)
	for _, c := range []struct {
		conn net.Conn
		r    *bufio.Reader
	}{{c1, r1}, {c2, r2}} {
		if resp := rawGet(t, c.conn, c.r, addr, "/healthz"); resp.StatusCode != http.StatusOK {
			t.Fatalf("/healthz: HTTP %d", resp.StatusCode)
		}
	}
	c3, r3 := dial(t, addr) // the kernel accepts it; the server does not
	fmt.Fprintf(c3, "GET /healthz HTTP/1.1\r\nHost: %s\r\n\r\n", addr)
	c3.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
	if _, err := r3.ReadByte(); err == nil {
		t.Fatal("a third connection was served with -max-conns 2")
	}
	c1.Close()
	c3.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(r3, nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("third connection once one closed: %v, %v", resp, err)
	}
	resp.Body.Close()
	c2.Close()

	if resp := rawGet(t, c3, r3, addr, "/mcp", "Accept: text/event-stream\r\nMcp-Session-Id: "+strings.Repeat("A", 100<<10)+"\r\n"); resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("100 KiB Mcp-Session-Id: HTTP %d, want 431", resp.StatusCode)
	}

	if _, _, err := runOnce(t, front.Run, newEnv(), "-listen", "127.0.0.1:0", "-max-sessions", "-1"); !errors.Is(err, app.ErrUsage) {
		t.Errorf("-max-sessions -1: %v, want a usage error", err)
	}
}

// frontPost sends one JSON-RPC POST to mcp-front.
func frontPost(t *testing.T, url, token, session string, body string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader([]byte(body)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if session != "" {
		req.Header.Set("Mcp-Session-Id", session)
		req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	resp, err := http.DefaultClient.Do(req.WithContext(ctx))
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

const limitsInit = `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"limits","version":"0"}}}`

// scrapeValue reads one sample of the front's /metrics page.
func scrapeValue(t *testing.T, metricsAddr, sample string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + metricsAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(sample) + ` (\S+)$`).FindSubmatch(b)
	if m == nil {
		return 0
	}
	v, _ := strconv.ParseFloat(string(m[1]), 64)
	return v
}

// TestFrontSessionAndAuthLimits: -max-sessions, -max-sessions-per-subject
// and -auth-failures reach the handler; with every session in use (each
// made a call), refusals keep no session and are counted in
// ticketrelay_http_refused_total; ticketrelay_http_sessions follows the
// live sessions, down again after a DELETE.
func TestFrontSessionAndAuthLimits(t *testing.T) {
	const (
		alice = "alice-0123456789abcdef0123456789"
		bob   = "bob-0123456789abcdef0123456789ab"
		carol = "carol-0123456789abcdef0123456789"
	)
	env := newEnv("TICKETRELAY_AUTH_TOKENS", "alice:"+alice+",bob:"+bob+",carol:"+carol)
	r := start(t, front.Run, env, "-listen", "127.0.0.1:0", "-metrics-listen", "127.0.0.1:0", "-create-db", "-db", filepath.Join(t.TempDir(), "t.db"),
		"-max-sessions", "2", "-max-sessions-per-subject", "1", "-auth-failures", "2")
	url, metrics := "http://"+r.addrs["mcp"]+"/mcp", r.addrs["metrics"]
	open := func(token string, want int) string {
		t.Helper()
		resp := frontPost(t, url, token, "", limitsInit)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Fatalf("initialize as %.5s: HTTP %d %s, want %d", token, resp.StatusCode, b, want)
		}
		if want != http.StatusOK && !strings.Contains(string(b), "too many sessions") {
			t.Errorf("refusal body %s", b)
		}
		session := resp.Header.Get("Mcp-Session-Id")
		if want == http.StatusOK {
			// A call: the session is in use, so never evicted for a new one.
			ping := frontPost(t, url, token, session, `{"jsonrpc":"2.0","id":1,"method":"ping"}`)
			io.Copy(io.Discard, ping.Body)
			ping.Body.Close()
			if ping.StatusCode != http.StatusOK {
				t.Fatalf("ping as %.5s: HTTP %d", token, ping.StatusCode)
			}
		}
		return session
	}
	aliceSession := open(alice, http.StatusOK)
	open(alice, http.StatusTooManyRequests) // per subject
	open(bob, http.StatusOK)
	open(carol, http.StatusServiceUnavailable) // all sessions taken
	if v := scrapeValue(t, metrics, "ticketrelay_http_sessions"); v != 2 {
		t.Errorf("ticketrelay_http_sessions %v, want 2", v)
	}
	for _, reason := range []string{"session_limit", "client_session_limit"} {
		if v := scrapeValue(t, metrics, `ticketrelay_http_refused_total{reason="`+reason+`"}`); v != 1 {
			t.Errorf(`refused{%s} %v, want 1`, reason, v)
		}
	}

	req, _ := http.NewRequest(http.MethodDelete, url, nil)
	req.Header.Set("Authorization", "Bearer "+alice)
	req.Header.Set("Mcp-Session-Id", aliceSession)
	req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusNoContent {
		t.Fatalf("DELETE: %v, %v", resp, err)
	}
	resp.Body.Close()
	testwait.For(t, 5*time.Second, "ticketrelay_http_sessions to go down to 1", func() bool {
		return scrapeValue(t, metrics, "ticketrelay_http_sessions") == 1
	})
	open(carol, http.StatusOK)

	for i, want := range []int{http.StatusUnauthorized, http.StatusUnauthorized, http.StatusTooManyRequests, http.StatusTooManyRequests} {
		resp := frontPost(t, url, "wrong-token-0123456789abcdef", "", limitsInit)
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("bad token %d: HTTP %d, want %d", i, resp.StatusCode, want)
		}
	}
	if v := scrapeValue(t, metrics, `ticketrelay_http_refused_total{reason="auth_throttled"}`); v != 2 {
		t.Errorf(`refused{auth_throttled} %v, want 2`, v)
	}
	if n := strings.Count(r.stderr.String(), "unauthenticated request"); n != 1 {
		t.Errorf("%d log lines for 4 refusals, want 1:\n%s", n, r.stderr)
	}
}

// TestFrontConnsUnboundedByDefault: by default mcp-front does not bound
// connections, so one address holding more idle keep-alive connections
// than the old default bound (1024) does not keep a newcomer from being
// served. A request refused for want of a token gets 401 and its
// connection is closed, so being refused does not hold one either.
func TestFrontConnsUnboundedByDefault(t *testing.T) {
	const token = "alice-0123456789abcdef0123456789"
	r := start(t, front.Run, newEnv("TICKETRELAY_AUTH_TOKENS", "alice:"+token), "-listen", "127.0.0.1:0", "-metrics-listen", "",
		"-create-db", "-db", filepath.Join(t.TempDir(), "t.db"))
	addr := r.addrs["mcp"]
	const held = 1025
	for i := range held {
		conn, br := dial(t, addr)
		if resp := rawGet(t, conn, br, addr, "/healthz"); resp.StatusCode != http.StatusOK {
			t.Fatalf("connection %d: /healthz HTTP %d", i, resp.StatusCode)
		}
	}
	conn, br := dial(t, addr)
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	resp := rawGet(t, conn, br, addr, "/mcp", "Accept: text/event-stream\r\n")
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("with %d connections held, a newcomer's GET /mcp without a token: HTTP %d, want 401", held, resp.StatusCode)
	}
	if !resp.Close || !closedWithin(conn, br, 5*time.Second) {
		t.Errorf("the connection of a 401 stays open (Connection: close %v)", resp.Close)
	}
}

// TestMetricsListenStaysOnLoopback: /metrics has no authentication, so
// both processes refuse -metrics-listen beyond loopback, before touching
// anything, unless -insecure; with it they serve and say so.
func TestMetricsListenStaysOnLoopback(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:0", ":0", "192.0.2.1:9464"} {
		dir := t.TempDir()
		procs := map[string]struct {
			run  func(context.Context, app.Env) error
			args []string
		}{
			"mcp-front":       {front.Run, []string{"-listen", "127.0.0.1:0", "-metrics-listen", addr, "-create-db", "-db", filepath.Join(dir, "f.db")}},
			"mcp-front stdio": {front.Run, []string{"-stdio", "-metrics-listen", addr, "-create-db", "-db", filepath.Join(dir, "f.db")}},
			"dispatcher":      {dispatcher.Run, []string{"-data", dir, "-nats-listen", "127.0.0.1:0", "-metrics-listen", addr}},
		}
		for name, p := range procs {
			_, _, err := runOnce(t, p.run, newEnv(), p.args...)
			if !errors.Is(err, app.ErrUsage) || !strings.Contains(err.Error(), "beyond loopback") || !strings.Contains(err.Error(), "-insecure") {
				t.Errorf("%s -metrics-listen %s: error %v, want a usage error naming loopback and -insecure", name, addr, err)
			}
		}
		if entries, err := os.ReadDir(dir); err != nil || len(entries) != 0 {
			t.Errorf("the refused starts left %v in %s (%v)", entries, dir, err)
		}
	}
	// Reached on a loopback address, an all-interfaces listener serves.
	for name, p := range map[string]struct {
		run  func(context.Context, app.Env) error
		args []string
	}{
		"mcp-front":  {front.Run, []string{"-listen", "127.0.0.1:0", "-create-db", "-db", filepath.Join(t.TempDir(), "f.db")}},
		"dispatcher": {dispatcher.Run, []string{"-data", t.TempDir(), "-nats-listen", "127.0.0.1:0"}},
	} {
		r := start(t, p.run, newEnv(), append(p.args, "-metrics-listen", "0.0.0.0:0", "-insecure")...)
		_, port, _ := net.SplitHostPort(r.addrs["metrics"])
		if v := scrapeValue(t, "127.0.0.1:"+port, "go_goroutines"); v == 0 {
			t.Errorf("%s: /metrics on 0.0.0.0 with -insecure serves no go_goroutines", name)
		}
		if !strings.Contains(r.stderr.String(), "serving /metrics beyond loopback WITHOUT authentication") {
			t.Errorf("%s: no warning for /metrics beyond loopback:\n%s", name, r.stderr)
		}
	}
}

// TestFrontHostRefusedCounted: a request that reaches the loopback
// listener under a foreign Host (DNS rebinding) gets 403 and is counted in
// ticketrelay_http_refused_total{reason="foreign_host"}, before
// authentication.
func TestFrontHostRefusedCounted(t *testing.T) {
	const token = "alice-0123456789abcdef0123456789"
	r := start(t, front.Run, newEnv("TICKETRELAY_AUTH_TOKENS", "alice:"+token), "-listen", "127.0.0.1:0", "-metrics-listen", "127.0.0.1:0",
		"-create-db", "-db", filepath.Join(t.TempDir(), "t.db"))
	url, metrics := "http://"+r.addrs["mcp"]+"/mcp", r.addrs["metrics"]
	for i, tok := range []string{token, ""} {
		req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(limitsInit))
		req.Host = "rebound.example"
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(b), `invalid Host header "rebound.example"`) {
			t.Errorf("request %d with Host rebound.example: HTTP %d %s, want 403", i, resp.StatusCode, b)
		}
	}
	if v := scrapeValue(t, metrics, `ticketrelay_http_refused_total{reason="foreign_host"}`); v != 2 {
		t.Errorf(`refused{foreign_host} %v, want 2`, v)
	}
	if v := scrapeValue(t, metrics, `ticketrelay_http_refused_total{reason="unauthenticated"}`); v != 0 {
		t.Errorf(`refused{unauthenticated} %v: the Host check comes first`, v)
	}
}
