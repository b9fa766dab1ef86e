package e2e

import (
	"bytes"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	_ "modernc.org/sqlite"

	"ticketrelay/testkit/e2eproc"
	"ticketrelay/testkit/testwait"
)

// stack is a dispatcher and an mcp-front sharing one data directory.
type stack struct {
	dir   string // data directory of the dispatcher
	db    string // SQLite file shared by both
	jsonl string // the local target's file
	disp  *e2eproc.Proc
	front *e2eproc.Proc
	url   string // streamable HTTP endpoint of mcp-front
	n     map[string]int
	// dispArgs are extra flags of every dispatcher of the stack.
	dispArgs []string
}

func newStack(t testing.TB) *stack {
	dir := t.TempDir()
	return &stack{
		dir:   dir,
		db:    filepath.Join(dir, "tickets.db"),
		jsonl: filepath.Join(dir, "tickets.jsonl"),
		n:     map[string]int{},
	}
}

// startStack starts a dispatcher and an mcp-front on fresh ports.
func startStack(t testing.TB) *stack {
	s := newStack(t)
	s.startDispatcher(t)
	s.startFront(t, "127.0.0.1:0")
	return s
}

func (s *stack) instance(kind string) string {
	s.n[kind]++
	return fmt.Sprintf("%s-%d", kind, s.n[kind])
}

func (s *stack) startDispatcher(t testing.TB, env ...string) *e2eproc.Proc {
	t.Helper()
	s.disp = e2eproc.Start(t, s.dir, s.instance("dispatcher"), dispatcherBin, append([]string{
		"-data", s.dir, "-db", s.db,
		"-nats-listen", "127.0.0.1:0", "-metrics-listen", "127.0.0.1:0",
		"-lease-ttl", "2s", "-poll-interval", "5ms",
	}, s.dispArgs...), env, "nats", "metrics")
	return s.disp
}

func (s *stack) startFront(t testing.TB, listen string) *e2eproc.Proc {
	t.Helper()
	s.front = e2eproc.Start(t, s.dir, s.instance("mcp-front"), frontBin, []string{
		"-db", s.db, "-listen", listen, "-metrics-listen", "127.0.0.1:0",
	}, nil, "mcp", "metrics")
	s.url = "http://" + s.front.Addr("mcp") + "/mcp"
	return s.front
}

// waitFor waits for cond with a deadline (see testkit/testwait).
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	testwait.For(t, timeout, what, cond)
}

// ---- metrics ----

// scrape reads p's /metrics, failing t if it cannot.
func scrape(t testing.TB, p *e2eproc.Proc) e2eproc.Metrics {
	t.Helper()
	m, err := e2eproc.Scrape(p.Addr("metrics"))
	if err != nil {
		t.Fatalf("scrape %s: %v", p.Name(), err)
	}
	return m
}

// ---- SQLite ----

// openDB opens the shared SQLite file read-only.
func openDB(t testing.TB, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+filepath.ToSlash(path)+"?mode=ro&_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	t.Cleanup(func() { db.Close() })
	return db
}

type rowCounts struct{ requests, tickets, outbox int }

func countRows(t testing.TB, db *sql.DB) rowCounts {
	t.Helper()
	var c rowCounts
	for _, q := range []struct {
		table string
		n     *int
	}{{"requests", &c.requests}, {"tickets", &c.tickets}, {"outbox", &c.outbox}} {
		if err := db.QueryRow("SELECT count(*) FROM " + q.table).Scan(q.n); err != nil {
			t.Fatalf("count %s: %v", q.table, err)
		}
	}
	return c
}

// ---- the local target's file ----

type jsonlLine struct {
	Key         string    `json:"key"`
	DeliveredAt time.Time `json:"delivered_at"`
	Ticket      struct {
		RequestID string `json:"request_id"`
		TicketID  string `json:"ticket_id"`
		Title     string `json:"title"`
		Body      string `json:"body"`
		Priority  string `json:"priority"`
	} `json:"ticket"`
}

// readJSONL parses every line of the local target's file; a line that is not
// a complete ticket line fails the test.
func readJSONL(t testing.TB, path string) []jsonlLine {
	t.Helper()
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	if len(b) == 0 {
		return nil
	}
	if !bytes.HasSuffix(b, []byte("\n")) {
		t.Fatalf("%s: last line is not terminated: %q", path, b[bytes.LastIndexByte(b, '\n')+1:])
	}
	var out []jsonlLine
	for i, line := range bytes.Split(bytes.TrimSuffix(b, []byte("\n")), []byte("\n")) {
		var l jsonlLine
		if err := json.Unmarshal(line, &l); err != nil || l.Key == "" || l.Ticket.TicketID == "" || l.DeliveredAt.IsZero() {
			t.Fatalf("%s line %d is not a ticket line (%v): %q", path, i+1, err, line)
		}
		out = append(out, l)
	}
	return out
}

func linesFor(lines []jsonlLine, key string) int {
	n := 0
	for _, l := range lines {
		if l.Key == key {
			n++
		}
	}
	return n
}

// portOf returns the port of a host:port address.
func portOf(t testing.TB, addr string) string {
	t.Helper()
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	return port
}

func contains(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}
