package adapters_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"ticketrelay/internal/app"
	"ticketrelay/internal/app/dispatcher"
	"ticketrelay/internal/app/front"
	"ticketrelay/testkit/e2eproc"
	"ticketrelay/testkit/testio"
	"ticketrelay/testkit/testwait"
)

// proc is one process run in-process.
type proc struct {
	name   string
	addrs  map[string]string
	stderr *testio.Buffer
}

// run starts a process and waits until it serves. It is stopped when the
// test ends and must then exit cleanly; its log is shown if the test failed.
func run(t *testing.T, name string, main func(context.Context, app.Env) error, env map[string]string, args ...string) *proc {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	p := &proc{name: name, stderr: &testio.Buffer{}}
	ready := make(chan map[string]string, 1)
	done := make(chan error, 1)
	go func() {
		done <- main(ctx, app.Env{
			Args: args, Stdin: strings.NewReader(""), Stdout: io.Discard, Stderr: p.stderr,
			Lookup: func(k string) (string, bool) { v, ok := env[k]; return v, ok },
			Ready:  func(a map[string]string) { ready <- a },
		})
	}()
	select {
	case p.addrs = <-ready:
	case err := <-done:
		cancel()
		t.Fatalf("%s exited before serving: %v\n%s", name, err, p.stderr)
	case <-time.After(30 * time.Second):
		cancel()
		t.Fatalf("%s not serving after 30s\n%s", name, p.stderr)
	}
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("%s exited with %v", name, err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("%s did not stop within 30s", name)
		}
		if t.Failed() {
			t.Logf("---- %s log ----\n%s", name, p.stderr)
		}
	})
	return p
}

// stack is the whole pipeline on one data directory.
type stack struct {
	dispatcher *proc
	front      *proc
	cs         *mcp.ClientSession
}

// startStack writes config, starts the dispatcher (embedded NATS, the
// environment env holding the target's secrets), then mcp-front on the same
// database (with no environment at all: it needs no secret), and connects
// an MCP client to it.
func startStack(t *testing.T, config string, env map[string]string) *stack {
	t.Helper()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "ticketrelay.yaml")
	if err := os.WriteFile(cfg, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(dir, "tickets.db")
	s := &stack{}
	// The dispatcher first: it creates the database, so the two processes
	// never race to migrate a fresh file.
	s.dispatcher = run(t, "dispatcher", dispatcher.Run, env,
		"-db", db, "-data", filepath.Join(dir, "data"), "-config", cfg,
		"-nats-listen", "127.0.0.1:0", "-metrics-listen", "127.0.0.1:0",
		"-retry-base", "20ms", "-retry-max", "200ms", "-delivery-timeout", "2s",
		"-lease-ttl", "2s", "-poll-interval", "5ms")
	s.front = run(t, "mcp-front", front.Run, nil,
		"-db", db, "-config", cfg, "-listen", "127.0.0.1:0", "-metrics-listen", "")

	s.cs = e2eproc.Connect(t, "http://"+s.front.addrs["mcp"]+"/mcp")
	return s
}

// createResult is a create tool's answer.
type createResult struct {
	RequestID string `json:"request_id"`
	TicketID  string `json:"ticket_id"`
	Target    string `json:"target"`
	Status    string `json:"status"`
	Replayed  bool   `json:"replayed"`
}

// status is find_request's answer.
type status struct {
	RequestID   string `json:"request_id"`
	Status      string `json:"status"`
	TicketID    string `json:"ticket_id"`
	Target      string `json:"target"`
	Attempts    int    `json:"attempts"`
	LastError   string `json:"last_error"`
	ExternalID  string `json:"external_id"`
	ExternalURL string `json:"external_url"`
	Detail      string `json:"detail"`
}

func (s *stack) create(t *testing.T, tool string, args map[string]any) createResult {
	t.Helper()
	var r createResult
	e2eproc.CallTool(t, s.cs, tool, args, &r)
	if r.RequestID != args["request_id"] || r.Status != "queued" || r.Replayed || r.TicketID == "" {
		t.Fatalf("%s answered %+v; want a fresh queued ticket for %v", tool, r, args["request_id"])
	}
	return r
}

func (s *stack) find(t *testing.T, id string) status {
	t.Helper()
	var st status
	e2eproc.CallTool(t, s.cs, "find_request", map[string]any{"request_id": id}, &st)
	if st.RequestID != id || st.Detail == "" {
		t.Fatalf("find_request %s answered %+v", id, st)
	}
	return st
}

// settle polls find_request until the request reaches a final state
// (delivered, failed or uncertain) and returns it.
func (s *stack) settle(t *testing.T, id string, timeout time.Duration) status {
	t.Helper()
	var (
		seen []string
		st   status
	)
	settled := testwait.Until(timeout, func() bool {
		st = s.find(t, id)
		if len(seen) == 0 || seen[len(seen)-1] != st.Status {
			seen = append(seen, st.Status)
		}
		switch st.Status {
		case "delivered", "failed", "uncertain":
			return true
		case "queued", "published", "retrying":
			return false
		}
		t.Fatalf("find_request %s: unexpected status %q: %+v", id, st.Status, st)
		return false
	})
	if !settled {
		t.Fatalf("request %s not settled after %s (statuses seen: %v); last: %+v", id, timeout, seen, st)
	}
	return st
}

// metric reads the dispatcher's /metrics and returns the value of the
// counter or gauge name with the given labels ("k", "v", ...); a series
// never touched is 0.
func (s *stack) metric(t *testing.T, name string, labels ...string) float64 {
	t.Helper()
	m, err := e2eproc.Scrape(s.dispatcher.addrs["metrics"])
	if err != nil {
		t.Fatalf("scrape: %v", err)
	}
	return m.Get(name, labels...)
}

// expectMetric waits until the dispatcher's metric name{labels} reads want.
// The forwarder counts an outcome right after it records it, so a request
// that find_request shows settled may not be counted yet for a moment.
func (s *stack) expectMetric(t *testing.T, want float64, name string, labels ...string) {
	t.Helper()
	var got float64
	if !testwait.Until(5*time.Second, func() bool { got = s.metric(t, name, labels...); return got == want }) {
		t.Errorf("%s%q = %v, want %v", name, labels, got, want)
	}
}

func yamlQuote(s string) string { return fmt.Sprintf("%q", s) }
