package app

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/prometheus/client_golang/prometheus"

	"ticketrelay/internal/flagenv"
	"ticketrelay/internal/testio"
	"ticketrelay/ledger"
	"ticketrelay/metrics"
	"ticketrelay/ticket"
)

// ---- running the processes in-process ----

// fakeEnv is a process environment: vars it holds, and a record of every
// name the process asked for.
type fakeEnv struct {
	mu    sync.Mutex
	vars  map[string]string
	asked []string
}

func newEnv(kv ...string) *fakeEnv {
	e := &fakeEnv{vars: map[string]string{}}
	for i := 0; i+1 < len(kv); i += 2 {
		e.vars[kv[i]] = kv[i+1]
	}
	return e
}

func (e *fakeEnv) Lookup(k string) (string, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.asked = append(e.asked, k)
	v, ok := e.vars[k]
	return v, ok
}

func (e *fakeEnv) Asked() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.asked)
}

// running is a process started by start.
type running struct {
	addrs  map[string]string
	stderr *testio.Buffer
	cancel context.CancelFunc
	done   chan error
}

// start runs a process in-process until it announces its addresses, and
// stops it (expecting a clean exit) when the test ends.
func start(t *testing.T, run func(context.Context, Env) error, env *fakeEnv, args ...string) *running {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{stderr: &testio.Buffer{}, cancel: cancel, done: make(chan error, 1)}
	ready := make(chan map[string]string, 1)
	go func() {
		r.done <- run(ctx, Env{
			Args: args, Stdin: strings.NewReader(""), Stdout: io.Discard, Stderr: r.stderr, Lookup: env.Lookup,
			Ready: func(a map[string]string) { ready <- a },
		})
	}()
	select {
	case r.addrs = <-ready:
	case err := <-r.done:
		cancel()
		t.Fatalf("process exited before serving: %v\nstderr:\n%s", err, r.stderr)
	case <-time.After(30 * time.Second):
		cancel()
		t.Fatalf("process not serving after 30s\nstderr:\n%s", r.stderr)
	}
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-r.done:
			if err != nil {
				t.Errorf("process exited with %v\nstderr:\n%s", err, r.stderr)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("process did not stop within 30s of its context ending\nstderr:\n%s", r.stderr)
		}
	})
	return r
}

// runOnce runs a process that is expected to return by itself (a config
// error, -help, an admin command) and returns its error and output.
func runOnce(t *testing.T, run func(context.Context, Env) error, env *fakeEnv, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out, errb testio.Buffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, Env{Args: args, Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errb, Lookup: env.Lookup,
			Ready: func(map[string]string) { t.Errorf("%v: the process started serving; it should have stopped", args) }})
	}()
	select {
	case err = <-done:
	case <-time.After(20 * time.Second):
		cancel()
		<-done
		t.Fatalf("%v: still running after 20s\nstderr:\n%s", args, errb.String())
	}
	return out.String(), errb.String(), err
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// ---- tools/list ----

// allKinds has one target of every kind and one tool bound to each. Every
// endpoint is a loopback address: nothing may contact it.
const allKinds = `key_namespace: apptest
targets:
  - name: queue
    kind: local
  - name: hook
    kind: webhook
    endpoint: http://127.0.0.1:9/hooks/tickets
    options: {signing_secret_env: T_HOOK_SECRET, token_env: T_HOOK_TOKEN}
  - name: support
    kind: zendesk
    endpoint: http://127.0.0.1:9
    options: {email: bot@acme.test, token_env: T_ZENDESK_TOKEN}
  - name: oncall
    kind: pagerduty
    endpoint: http://127.0.0.1:9
    options: {routing_key_env: T_PAGERDUTY_KEY}
  - name: bugs
    kind: github
    endpoint: http://127.0.0.1:9
    options: {owner: acme, repo: support, token_env: T_GITHUB_TOKEN}
  - name: ops-jira
    kind: jira
    endpoint: http://127.0.0.1:9
    options: {email: bot@acme.test, token_env: T_JIRA_TOKEN, project: OPS}
  - name: alerts
    kind: slack
    options: {webhook_url_env: T_SLACK_URL}
tools:
  - {name: file_local, target: queue, description: File a ticket in the local queue.}
  - {name: send_hook, target: hook}
  - {name: open_support_ticket, target: support}
  - {name: page_oncall, target: oncall}
  - {name: file_bug, target: bugs}
  - {name: open_ops_issue, target: ops-jira}
  - {name: notify_ops, target: alerts}
`

// secretVars are the variables allKinds names for secrets.
var secretVars = []string{"T_HOOK_SECRET", "T_HOOK_TOKEN", "T_ZENDESK_TOKEN", "T_PAGERDUTY_KEY", "T_GITHUB_TOKEN", "T_JIRA_TOKEN", "T_SLACK_URL"}

// idempotentTools are bound to targets with a dedupe key; the other create
// tools are bound to targets without one.
var (
	idempotentTools    = []string{"file_local", "send_hook", "open_support_ticket", "page_oncall"}
	nonIdempotentTools = []string{"file_bug", "open_ops_issue", "notify_ops"}
)

func startFront(t *testing.T, env *fakeEnv, args ...string) (*running, string) {
	t.Helper()
	r := start(t, RunFront, env, append([]string{"-listen", "127.0.0.1:0", "-metrics-listen", "",
		"-db", filepath.Join(t.TempDir(), "tickets.db")}, args...)...)
	return r, "http://" + r.addrs["mcp"] + "/mcp"
}

func TestToolsListAnnotationsPerKind(t *testing.T) {
	cfg := writeFile(t, "ticketrelay.yaml", allKinds)
	env := newEnv() // no secrets, nothing at all
	front, url := startFront(t, env, "-config", cfg)
	if _, ok := front.addrs["metrics"]; ok {
		t.Fatalf("-metrics-listen \"\" should turn metrics off, yet addrs = %v", front.addrs)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c := mcp.NewClient(&mcp.Implementation{Name: "app-test", Version: "1"}, nil)
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url, MaxRetries: -1, DisableStandaloneSSE: true}, nil)
	if err != nil {
		t.Fatalf("connect %s: %v", url, err)
	}
	defer cs.Close()
	res, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	tools := map[string]*mcp.Tool{}
	for _, tl := range res.Tools {
		tools[tl.Name] = tl
	}
	if want := len(idempotentTools) + len(nonIdempotentTools) + 1; len(tools) != want {
		t.Fatalf("tools/list has %d tools (%v), want %d", len(tools), slices.Sorted(maps.Keys(tools)), want)
	}
	for _, name := range append(slices.Clone(idempotentTools), nonIdempotentTools...) {
		tl := tools[name]
		if tl == nil {
			t.Errorf("tool %s is missing", name)
			continue
		}
		a := tl.Annotations
		if a == nil {
			t.Errorf("%s: no annotations", name)
			continue
		}
		idem := slices.Contains(idempotentTools, name)
		if a.IdempotentHint != idem {
			t.Errorf("%s: idempotentHint %v, want %v", name, a.IdempotentHint, idem)
		}
		if a.DestructiveHint == nil || *a.DestructiveHint {
			t.Errorf("%s: destructiveHint %v, want an explicit false", name, a.DestructiveHint)
		}
		if a.OpenWorldHint == nil || !*a.OpenWorldHint {
			t.Errorf("%s: openWorldHint %v, want true", name, a.OpenWorldHint)
		}
		if a.ReadOnlyHint {
			t.Errorf("%s: readOnlyHint true on a create tool", name)
		}
		retryAdvice := strings.Contains(tl.Description, "do NOT retry") && strings.Contains(tl.Description, "first call find_request")
		if retryAdvice == idem {
			t.Errorf("%s (idempotent %v): description says to call find_request before a retry: %v; want %v\n%s",
				name, idem, retryAdvice, !idem, tl.Description)
		}
	}
	if d := tools["file_local"].Description; !strings.HasPrefix(d, "File a ticket in the local queue.") {
		t.Errorf("file_local: the configured description is not used: %q", d)
	}
	if fr := tools["find_request"]; fr == nil || fr.Annotations == nil || !fr.Annotations.ReadOnlyHint {
		t.Errorf("find_request must be readOnlyHint: %+v", fr)
	}

	// On the wire: destructiveHint false is present, not left to the
	// client's default (true); idempotentHint is absent where it is false.
	raw := rawToolsList(t, url)
	for _, name := range append(slices.Clone(idempotentTools), nonIdempotentTools...) {
		a, ok := raw[name]
		if !ok {
			t.Errorf("raw tools/list: no %s", name)
			continue
		}
		if v, ok := a["destructiveHint"]; !ok || v != false {
			t.Errorf("raw tools/list: %s annotations %v: want \"destructiveHint\": false on the wire", name, a)
		}
		if v, ok := a["openWorldHint"]; !ok || v != true {
			t.Errorf("raw tools/list: %s annotations %v: want \"openWorldHint\": true", name, a)
		}
		if v := a["idempotentHint"]; slices.Contains(nonIdempotentTools, name) && v == true ||
			slices.Contains(idempotentTools, name) && v != true {
			t.Errorf("raw tools/list: %s idempotentHint %v", name, v)
		}
	}
	if a := raw["find_request"]; a["readOnlyHint"] != true {
		t.Errorf("raw tools/list: find_request annotations %v: want readOnlyHint true", a)
	}

	// The front never asked for a secret: it read only its own flags' twins.
	for _, k := range env.Asked() {
		if !strings.HasPrefix(k, flagenv.Prefix) || slices.Contains(secretVars, k) {
			t.Errorf("mcp-front looked up %s: it must need no downstream secret", k)
		}
	}
}

// rawToolsList runs initialize and tools/list by hand and returns each
// tool's annotations as decoded from the raw JSON.
func rawToolsList(t *testing.T, url string) map[string]map[string]any {
	t.Helper()
	const version = "2025-06-18"
	resp, body := rawPost(t, url, "", fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":%q,`+
		`"capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`, version))
	session := resp.Header.Get("Mcp-Session-Id")
	if resp.StatusCode != http.StatusOK || session == "" {
		t.Fatalf("initialize: %s (session %q): %s", resp.Status, session, body)
	}
	if resp, body = rawPost(t, url, session, `{"jsonrpc":"2.0","method":"notifications/initialized"}`); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("notifications/initialized: %s: %s", resp.Status, body)
	}
	resp, body = rawPost(t, url, session, `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("tools/list: %s: %s", resp.Status, body)
	}
	msg := jsonRPCMessage(t, resp.Header.Get("Content-Type"), body)
	var out struct {
		Result struct {
			Tools []struct {
				Name        string          `json:"name"`
				Annotations json.RawMessage `json:"annotations"`
			} `json:"tools"`
		} `json:"result"`
	}
	if err := json.Unmarshal(msg, &out); err != nil {
		t.Fatalf("tools/list answer %s: %v", msg, err)
	}
	m := map[string]map[string]any{}
	for _, tl := range out.Result.Tools {
		var a map[string]any
		if err := json.Unmarshal(tl.Annotations, &a); err != nil {
			t.Fatalf("tool %s annotations %s: %v", tl.Name, tl.Annotations, err)
		}
		m[tl.Name] = a
	}
	return m
}

func rawPost(t *testing.T, url, session, body string) (*http.Response, []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if session != "" {
		req.Header.Set("Mcp-Session-Id", session)
		req.Header.Set("MCP-Protocol-Version", "2025-06-18")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	return resp, b
}

// jsonRPCMessage returns the one JSON-RPC message of an answer, plain JSON
// or a server-sent event stream.
func jsonRPCMessage(t *testing.T, contentType string, body []byte) []byte {
	t.Helper()
	if strings.HasPrefix(contentType, "application/json") {
		return body
	}
	var data [][]byte
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if d, ok := bytes.CutPrefix(sc.Bytes(), []byte("data:")); ok && len(bytes.TrimSpace(d)) > 0 {
			data = append(data, bytes.TrimSpace(d))
		}
	}
	if len(data) != 1 {
		t.Fatalf("want one SSE message, got %d in %q", len(data), body)
	}
	return data[0]
}

// ---- configuration errors ----

func TestConfigErrorsStopBothProcesses(t *testing.T) {
	cases := []struct {
		name, yaml string
		want       []string // pieces of the one-line error
	}{
		{"unknown key", "targets:\n  - name: a\n    kind: local\n    colour: red\n", []string{`unknown key "colour"`, "line 4"}},
		{"unknown kind", "targets:\n  - name: a\n    kind: trello\n", []string{`target "a"`, `unknown kind "trello"`}},
		{"tool bound to a missing target", "targets:\n  - {name: a, kind: local}\ntools:\n  - {name: t, target: nope}\n",
			[]string{`tool "t"`, `target "nope"`, "not defined"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := writeFile(t, "bad.yaml", c.yaml)
			dir := t.TempDir()
			procs := map[string]struct {
				run  func(context.Context, Env) error
				args []string
			}{
				"mcp-front": {RunFront, []string{"-config", cfg, "-listen", "127.0.0.1:0", "-metrics-listen", "", "-db", filepath.Join(dir, "f.db")}},
				"dispatcher": {RunDispatcher, []string{"-config", cfg, "-data", dir, "-nats-listen", "127.0.0.1:0",
					"-metrics-listen", ""}},
			}
			for name, p := range procs {
				_, _, err := runOnce(t, p.run, newEnv(), p.args...)
				if err == nil {
					t.Fatalf("%s started with a bad config", name)
				}
				checkOneLine(t, name, err, append([]string{cfg}, c.want...)...)
				if errors.Is(err, ErrUsage) {
					t.Errorf("%s: a config error is not a usage error: %v", name, err)
				}
			}
			if _, err := os.Stat(filepath.Join(dir, "f.db")); err == nil {
				t.Error("mcp-front created its database before checking the config")
			}
		})
	}

	t.Run("missing secret", func(t *testing.T) {
		cfg := writeFile(t, "ticketrelay.yaml", allKinds)
		env := newEnv("T_HOOK_SECRET", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "T_HOOK_TOKEN", "tok",
			"T_ZENDESK_TOKEN", "zd", "T_PAGERDUTY_KEY", "0123456789abcdef0123456789abcdef",
			"T_GITHUB_TOKEN", "gh", "T_SLACK_URL", "http://127.0.0.1:9/services/T/B/x") // no T_JIRA_TOKEN
		dir := t.TempDir()
		_, _, err := runOnce(t, RunDispatcher, env, "-config", cfg, "-data", dir, "-nats-listen", "127.0.0.1:0", "-metrics-listen", "")
		if err == nil {
			t.Fatal("the dispatcher started without T_JIRA_TOKEN")
		}
		checkOneLine(t, "dispatcher", err, "T_JIRA_TOKEN", "is not set", `target "ops-jira"`)
		// The same file is fine for mcp-front, which reads no secret.
		startFront(t, newEnv(), "-config", cfg)
	})
}

func checkOneLine(t *testing.T, who string, err error, want ...string) {
	t.Helper()
	msg := err.Error()
	if strings.Contains(msg, "\n") {
		t.Errorf("%s: the error is not one line: %q", who, msg)
	}
	for _, w := range want {
		if !strings.Contains(msg, w) {
			t.Errorf("%s: error %q does not name %q", who, msg, w)
		}
	}
}

// ---- flags ----

// helpFlags parses PrintDefaults output into flag name → its whole entry.
func helpFlags(out string) map[string]string {
	entries := map[string]string{}
	re := regexp.MustCompile(`^  -([a-z][a-z0-9-]*)`)
	var cur string
	for line := range strings.SplitSeq(out, "\n") {
		if m := re.FindStringSubmatch(line); m != nil {
			cur = m[1]
			entries[cur] = line
			continue
		}
		if cur != "" && strings.HasPrefix(line, "    ") {
			entries[cur] += "\n" + line
			continue
		}
		cur = ""
	}
	return entries
}

func TestFlags(t *testing.T) {
	procs := []struct {
		name string
		run  func(context.Context, Env) error
		core []string // flags that must be listed
	}{
		{"mcp-front", RunFront, []string{"db", "listen", "metrics-listen", "stdio", "config", "log-level", "allowed-origins", "stateless", "addr-file"}},
		{"dispatcher", RunDispatcher, []string{"db", "data", "nats", "nats-listen", "metrics-listen", "config", "log-level",
			"lease-ttl", "dup-window", "workers", "max-attempts", "retry-base", "retry-max", "delivery-timeout", "retention", "poll-interval", "addr-file"}},
	}
	for _, p := range procs {
		t.Run(p.name+" -help", func(t *testing.T) {
			stdout, stderr, err := runOnce(t, p.run, newEnv(), "-help")
			if err != nil {
				t.Fatalf("-help: %v", err)
			}
			if stdout != "" {
				t.Errorf("-help wrote to stdout (reserved for JSON-RPC): %q", stdout)
			}
			entries := helpFlags(stderr)
			for _, f := range p.core {
				if _, ok := entries[f]; !ok {
					t.Errorf("-help does not list -%s:\n%s", f, stderr)
				}
			}
			for f, e := range entries {
				if !strings.Contains(e, flagenv.EnvName(f)) {
					t.Errorf("-help: -%s does not show its environment twin %s:\n%s", f, flagenv.EnvName(f), e)
				}
			}
		})
		t.Run(p.name+" bad flag", func(t *testing.T) {
			for _, args := range [][]string{{"-no-such-flag"}, {"-log-level", "loud"}, {"-metrics-listen"}} {
				_, _, err := runOnce(t, p.run, newEnv(), args...)
				if !errors.Is(err, ErrUsage) {
					t.Errorf("%v: error %v, want ErrUsage", args, err)
				}
			}
			// A malformed environment twin is a usage error too.
			_, _, err := runOnce(t, p.run, newEnv("TICKETRELAY_LOG_LEVEL", "loud"))
			if !errors.Is(err, ErrUsage) {
				t.Errorf("TICKETRELAY_LOG_LEVEL=loud: error %v, want ErrUsage", err)
			}
		})
	}
	t.Run("dispatcher bad durations", func(t *testing.T) {
		for _, args := range [][]string{{"-retry-base", "soon"}, {"-dup-window", "1m"}, {"-dup-window", "2h", "-retention", "1h"}} {
			_, _, err := runOnce(t, RunDispatcher, newEnv(), append(args, "-data", t.TempDir())...)
			if !errors.Is(err, ErrUsage) {
				t.Errorf("%v: error %v, want ErrUsage", args, err)
			}
		}
	})

	t.Run("TICKETRELAY_LISTEN applies", func(t *testing.T) {
		port := freePort(t)
		dir := t.TempDir()
		env := newEnv("TICKETRELAY_LISTEN", port, "TICKETRELAY_METRICS_LISTEN", "", "TICKETRELAY_DB", filepath.Join(dir, "env.db"))
		r := start(t, RunFront, env)
		if r.addrs["mcp"] != port {
			t.Fatalf("listening on %s, want %s from TICKETRELAY_LISTEN", r.addrs["mcp"], port)
		}
		if _, ok := r.addrs["metrics"]; ok {
			t.Errorf("TICKETRELAY_METRICS_LISTEN= should turn metrics off: %v", r.addrs)
		}
		if _, err := os.Stat(filepath.Join(dir, "env.db")); err != nil {
			t.Errorf("TICKETRELAY_DB was not used: %v", err)
		}
		resp, err := http.Get("http://" + port + "/healthz")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("/healthz: %s", resp.Status)
		}
	})

	t.Run("a flag wins over its twin", func(t *testing.T) {
		// Were the twin used, the front would listen on port 1 (or fail to bind it).
		env := newEnv("TICKETRELAY_LISTEN", "127.0.0.1:1")
		r, _ := startFront(t, env)
		if strings.HasSuffix(r.addrs["mcp"], ":1") {
			t.Fatalf("listening on %s: the environment won over -listen", r.addrs["mcp"])
		}
	})
}

// freePort returns a loopback address with a port nothing listens on now.
func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// ---- dispatcher admin commands ----

// adminDB is a database made by the ledger, with requests in known states.
type adminDB struct {
	path string
	db   *ledger.DB
	w    *ledger.Writer
	l    *ledger.Ledger
}

func newAdminDB(t *testing.T) *adminDB {
	t.Helper()
	path := filepath.Join(t.TempDir(), "tickets.db")
	ctx := context.Background()
	db, err := ledger.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	w := ledger.NewWriter(db, log, metrics.NewDispatcher(prometheus.NewRegistry()).Writer)
	t.Cleanup(func() { w.Close(); db.Close() })
	return &adminDB{path: path, db: db, w: w, l: ledger.New(db, w, time.Now)}
}

// request accepts a request for target, marks its outbox row published (as
// the relay would) and records its delivery in state (empty: none).
func (a *adminDB) request(t *testing.T, id, target, state string, attempts int, lastErr, ext string) ledger.Result {
	t.Helper()
	ctx := context.Background()
	req := ticket.Request{RequestID: id, Tool: "create_ticket", Target: target, Title: "Ticket " + id, Body: "body", Labels: []string{"admin"}}
	if err := req.Normalize(); err != nil {
		t.Fatal(err)
	}
	res, err := a.l.Create(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	err = a.w.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `UPDATE outbox SET published_at = ? WHERE request_id = ?`, time.Now().UnixNano(), id)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if state != "" {
		d := ledger.Delivery{RequestID: id, Target: target, State: state, Attempts: attempts, LastError: lastErr, ExternalID: ext}
		if err := a.l.RecordDelivery(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	return res
}

func (a *adminDB) find(t *testing.T, id string) ledger.RequestStatus {
	t.Helper()
	st, err := a.l.Find(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// outboxRow reads a request's outbox row.
func (a *adminDB) outboxRow(t *testing.T, id string) (publishedAt sql.NullInt64, generation int) {
	t.Helper()
	err := a.db.Reader().QueryRowContext(context.Background(),
		`SELECT published_at, generation FROM outbox WHERE request_id = ?`, id).Scan(&publishedAt, &generation)
	if err != nil {
		t.Fatal(err)
	}
	return publishedAt, generation
}

func (a *adminDB) admin(t *testing.T, args ...string) (string, error) {
	t.Helper()
	args = append(slices.Clone(args), "-db", a.path)
	stdout, _, err := runOnce(t, RunDispatcher, newEnv(), args...)
	return stdout, err
}

func TestAdminCommands(t *testing.T) {
	a := newAdminDB(t)
	a.request(t, "req-delivered", "support", string(ledger.StatusDelivered), 1, "", "4711")
	a.request(t, "req-failed-support", "support", string(ledger.StatusFailed), 3, "permanent error (HTTP 422): Description: cannot be blank", "")
	a.request(t, "req-failed-jira", "ops-jira", string(ledger.StatusFailed), 1, "auth error (HTTP 401): bad token", "")
	a.request(t, "req-failed-jira-2", "ops-jira", string(ledger.StatusFailed), 2, "permanent error (HTTP 400): issuetype", "")
	unc := a.request(t, "req-uncertain", "alerts", string(ledger.StatusUncertain), 1,
		"attempt 1 may have created the item (transient error: EOF) and alerts has no consistent lookup", "")
	a.request(t, "req-uncertain-2", "alerts", string(ledger.StatusUncertain), 1, "attempt 1 ended without an answer", "")
	a.request(t, "req-retrying", "support", string(ledger.StatusRetrying), 2, "transient error (HTTP 500)", "")
	// One accepted and not yet published: the backlog.
	ctx := context.Background()
	req := ticket.Request{RequestID: "req-queued", Tool: "create_ticket", Target: "support", Title: "Queued"}
	if err := req.Normalize(); err != nil {
		t.Fatal(err)
	}
	if _, err := a.l.Create(ctx, req); err != nil {
		t.Fatal(err)
	}

	t.Run("status", func(t *testing.T) {
		out, err := a.admin(t, "status")
		if err != nil {
			t.Fatalf("status: %v", err)
		}
		if !regexp.MustCompile(`(?m)^outbox backlog: 1 \(oldest \S+\)$`).MatchString(out) {
			t.Errorf("status does not show a backlog of 1:\n%s", out)
		}
		rows := map[string]string{
			// TARGET DELIVERED IN-FLIGHT RETRYING FAILED UNCERTAIN
			"support":  `support\s+1\s+0\s+1\s+1\s+0`,
			"ops-jira": `ops-jira\s+0\s+0\s+0\s+2\s+0`,
			"alerts":   `alerts\s+0\s+0\s+0\s+0\s+2`,
		}
		for target, re := range rows {
			if !regexp.MustCompile(`(?m)^` + re + `\s*$`).MatchString(out) {
				t.Errorf("status: the %s row does not match %s:\n%s", target, re, out)
			}
		}
		for _, want := range []string{"uncertain requests", "req-uncertain ", unc.TicketID, "alerts", "may have created the item",
			"req-uncertain-2", "dispatcher resolve"} {
			if !strings.Contains(out, want) {
				t.Errorf("status does not list %q:\n%s", want, out)
			}
		}
		if strings.Contains(out, "req-failed-support") {
			t.Errorf("status lists a failed request among the uncertain ones:\n%s", out)
		}

		js, err := a.admin(t, "status", "-json")
		if err != nil {
			t.Fatalf("status -json: %v", err)
		}
		var s ledger.Summary
		if err := json.Unmarshal([]byte(js), &s); err != nil {
			t.Fatalf("status -json: %v\n%s", err, js)
		}
		if s.Backlog != 1 || len(s.Uncertain) != 2 || len(s.Targets) != 3 {
			t.Errorf("status -json: backlog %d, %d uncertain, %d targets; want 1, 2, 3:\n%s", s.Backlog, len(s.Uncertain), len(s.Targets), js)
		}
	})

	t.Run("redrive one", func(t *testing.T) {
		if pub, gen := a.outboxRow(t, "req-failed-support"); !pub.Valid || gen != 0 {
			t.Fatalf("before the redrive: published %v, generation %d", pub, gen)
		}
		out, err := a.admin(t, "redrive", "req-failed-support")
		if err != nil {
			t.Fatalf("redrive: %v", err)
		}
		if !strings.Contains(out, "redriven req-failed-support") {
			t.Errorf("redrive output %q", out)
		}
		st := a.find(t, "req-failed-support")
		if st.Status != ledger.StatusRetrying || st.Attempts != 0 {
			t.Errorf("after the redrive: %s with %d attempts; want retrying with 0", st.Status, st.Attempts)
		}
		if pub, gen := a.outboxRow(t, "req-failed-support"); pub.Valid || gen != 1 {
			t.Errorf("after the redrive the outbox row has published_at %v and generation %d; want NULL and 1", pub, gen)
		}
		// A redrive of a request that is not failed changes nothing.
		for _, id := range []string{"req-delivered", "req-uncertain", "req-retrying"} {
			before := a.find(t, id)
			_, err := a.admin(t, "redrive", id)
			if err == nil || errors.Is(err, ErrUsage) || !errors.Is(err, ledger.ErrState) {
				t.Errorf("redrive of %s (%s): error %v; want a state error", id, before.Status, err)
			}
			if after := a.find(t, id); after.Status != before.Status || after.Attempts != before.Attempts {
				t.Errorf("a refused redrive changed %s: %s/%d → %s/%d", id, before.Status, before.Attempts, after.Status, after.Attempts)
			}
			if pub, gen := a.outboxRow(t, id); !pub.Valid || gen != 0 {
				t.Errorf("a refused redrive touched %s's outbox row: published %v generation %d", id, pub, gen)
			}
		}
		if _, err := a.admin(t, "redrive", "req-never-seen"); err == nil {
			t.Error("redrive of an unknown request succeeded")
		}
	})

	t.Run("redrive -failed -target", func(t *testing.T) {
		a.request(t, "req-failed-other", "bugs", string(ledger.StatusFailed), 1, "permanent error", "")
		out, err := a.admin(t, "redrive", "-failed", "-target", "ops-jira")
		if err != nil {
			t.Fatalf("redrive -failed -target ops-jira: %v", err)
		}
		if !strings.Contains(out, "2 failed requests redriven") {
			t.Errorf("output %q: want 2 redriven", out)
		}
		for _, id := range []string{"req-failed-jira", "req-failed-jira-2"} {
			if st := a.find(t, id); st.Status != ledger.StatusRetrying || st.Attempts != 0 {
				t.Errorf("%s: %s/%d after the redrive; want retrying/0", id, st.Status, st.Attempts)
			}
			if pub, gen := a.outboxRow(t, id); pub.Valid || gen != 1 {
				t.Errorf("%s: outbox published %v generation %d; want NULL and 1", id, pub, gen)
			}
		}
		if st := a.find(t, "req-failed-other"); st.Status != ledger.StatusFailed {
			t.Errorf("another target's failed request was redriven: %s", st.Status)
		}
	})

	t.Run("resolve", func(t *testing.T) {
		out, err := a.admin(t, "resolve", "req-uncertain", "-delivered", "1712345678.000100")
		if err != nil {
			t.Fatalf("resolve: %v", err)
		}
		if !strings.Contains(out, "req-uncertain settled as delivered (1712345678.000100)") {
			t.Errorf("resolve output %q", out)
		}
		if st := a.find(t, "req-uncertain"); st.Status != ledger.StatusDelivered || st.ExternalID != "1712345678.000100" {
			t.Errorf("after resolve: %s with external id %q", st.Status, st.ExternalID)
		}
		// Flags before the id work as well.
		if _, err := a.admin(t, "resolve", "-failed", "req-uncertain-2"); err != nil {
			t.Fatalf("resolve -failed: %v", err)
		}
		if st := a.find(t, "req-uncertain-2"); st.Status != ledger.StatusFailed {
			t.Errorf("after resolve -failed: %s", st.Status)
		}
		for _, id := range []string{"req-delivered", "req-retrying", "req-uncertain"} {
			before := a.find(t, id)
			_, err := a.admin(t, "resolve", id, "-delivered", "X-1")
			if err == nil || errors.Is(err, ErrUsage) || !errors.Is(err, ledger.ErrState) {
				t.Errorf("resolve of %s (%s): error %v; want a state error", id, before.Status, err)
			}
			if after := a.find(t, id); after.Status != before.Status || after.ExternalID != before.ExternalID {
				t.Errorf("a refused resolve changed %s: %+v → %+v", id, before, after)
			}
		}
		if _, err := a.admin(t, "resolve", "req-never-seen", "-failed"); !errors.Is(err, ledger.ErrNotFound) {
			t.Errorf("resolve of an unknown request: %v; want ErrNotFound", err)
		}
	})

	t.Run("usage errors", func(t *testing.T) {
		for _, args := range [][]string{
			{"status", "extra"},
			{"status", "-bogus"},
			{"redrive"},
			{"redrive", "-failed", "req-delivered"},
			{"redrive", "-target", "support", "req-delivered"},
			{"resolve"},
			{"resolve", "req-uncertain"},
			{"resolve", "req-uncertain", "-failed", "-delivered", "X"},
			{"resolve", "a", "b", "-failed"},
		} {
			_, err := a.admin(t, args...)
			if !errors.Is(err, ErrUsage) {
				t.Errorf("%v: error %v, want ErrUsage", args, err)
			}
		}
		if _, stderr, err := runOnce(t, RunDispatcher, newEnv(), "status", "-help"); err != nil || !strings.Contains(stderr, "dispatcher resolve") {
			t.Errorf("status -help: %v\n%s", err, stderr)
		}
	})
}
