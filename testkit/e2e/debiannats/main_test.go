package debiannats_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"ticketrelay/delivery/natsjs"
	"ticketrelay/testkit/e2eproc"
	"ticketrelay/testkit/testwait"
)

// enableEnv names Debian's nats-server binary (make test-debian-nats sets
// it to /usr/sbin/nats-server); unset, the tests skip.
const enableEnv = "TICKETRELAY_DEBIAN_NATS"

var (
	skip           string // why the tests skip, if they do
	debianBin      string // Debian's nats-server
	debianVersion  string // its version, "2.9.10"
	debianTooOld   bool   // older than natsjs' minimum
	moduleNATSBin  string // the module's pinned nats-server: the upgrade
	frontBin       string
	dispatcherBin  string
	deliverTimeout = 60 * time.Second
)

func TestMain(m *testing.M) {
	if debianBin = os.Getenv(enableEnv); debianBin == "" {
		skip = enableEnv + " is unset: these tests need Debian's nats-server (make test-debian-nats installs it)"
		os.Exit(m.Run())
	}
	os.Exit(run(m))
}

func run(m *testing.M) int {
	fail := func(err error) int { fmt.Fprintln(os.Stderr, "testkit/e2e/debiannats:", err); return 1 }
	var err error
	if debianVersion, err = e2eproc.NATSServerVersion(debianBin); err != nil {
		return fail(err)
	}
	debianTooOld = natsjs.ServerVersionTooOld(debianVersion)
	fmt.Fprintf(os.Stderr, "testkit/e2e/debiannats: %s is nats-server %s\n", debianBin, debianVersion)
	root, err := e2eproc.ModuleRoot()
	if err != nil {
		return fail(err)
	}
	tmp, err := os.MkdirTemp("", "ticketrelay-debiannats-")
	if err != nil {
		return fail(err)
	}
	defer os.RemoveAll(tmp)
	if frontBin, dispatcherBin, err = e2eproc.Build(root, tmp); err != nil {
		return fail(err)
	}
	if debianTooOld {
		if moduleNATSBin, err = e2eproc.BuildNATSServer(root, tmp); err != nil {
			return fail(err)
		}
	}
	return m.Run()
}

func needDebian(t *testing.T) {
	t.Helper()
	if skip != "" {
		t.Skip(skip)
	}
}

// stack is one host's data directory, its mcp-front (which needs no NATS
// on a single host) and the dispatchers started on it, one at a time.
type stack struct {
	dir, db, jsonl string
	n              int
	front          *e2eproc.Proc
	cs             *mcp.ClientSession
}

const installationName = "deb"

func newStack(t *testing.T) *stack {
	t.Helper()
	dir := t.TempDir()
	s := &stack{dir: dir, db: filepath.Join(dir, "tickets.db"), jsonl: filepath.Join(dir, "tickets.jsonl")}
	s.front = e2eproc.Start(t, dir, "mcp-front", frontBin,
		[]string{"-db", s.db, "-create-db", "-listen", "127.0.0.1:0", "-metrics-listen", ""}, nil, "mcp")
	s.cs = e2eproc.Connect(t, "http://"+s.front.Addr("mcp")+"/mcp")
	return s
}

func (s *stack) dispatcherArgs(url string) []string {
	return []string{"-data", s.dir, "-db", s.db, "-nats", url, "-installation", installationName,
		"-metrics-listen", "127.0.0.1:0", "-lease-ttl", "2s", "-poll-interval", "5ms"}
}

// startDispatcher starts a dispatcher on the server url; it must serve.
func (s *stack) startDispatcher(t *testing.T, url string) *e2eproc.Proc {
	t.Helper()
	s.n++
	return e2eproc.Start(t, s.dir, fmt.Sprintf("dispatcher-%d", s.n), dispatcherBin, s.dispatcherArgs(url), nil, "metrics")
}

// refusedDispatcher runs a dispatcher on the server url, which must exit
// with status 1, and returns the lines it wrote.
func (s *stack) refusedDispatcher(t *testing.T, url string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, dispatcherBin, s.dispatcherArgs(url)...)
	cmd.Env = e2eproc.Environ()
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("the dispatcher on nats-server %s: %v (want exit status 1), output:\n%s", debianVersion, err, out)
	}
	return strings.Split(strings.TrimSpace(string(out)), "\n")
}

// create files a ticket; it must be queued.
func (s *stack) create(t *testing.T, id string) {
	t.Helper()
	var r struct{ Status string }
	e2eproc.CallTool(t, s.cs, "create_ticket", map[string]any{"request_id": id, "title": "ticket " + id, "priority": "high"}, &r)
	if r.Status != "queued" {
		t.Fatalf("create_ticket %s: status %q, want queued", id, r.Status)
	}
}

func (s *stack) status(t *testing.T, id string) string {
	t.Helper()
	var r struct{ Status string }
	e2eproc.CallTool(t, s.cs, "find_request", map[string]any{"request_id": id}, &r)
	return r.Status
}

// waitDelivered waits until find_request says id is delivered, and checks
// that the local target got it exactly once.
func (s *stack) waitDelivered(t *testing.T, id string) {
	t.Helper()
	var st string
	if !testwait.Until(deliverTimeout, func() bool { st = s.status(t, id); return st == "delivered" }) {
		t.Fatalf("request %s: %s after %s, not delivered", id, st, deliverTimeout)
	}
	if n := s.delivered(t, id); n != 1 {
		t.Fatalf("request %s delivered %d times", id, n)
	}
}

// delivered counts the local target's lines for request id.
func (s *stack) delivered(t *testing.T, id string) int {
	t.Helper()
	b, err := os.ReadFile(s.jsonl)
	if errors.Is(err, os.ErrNotExist) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for line := range strings.Lines(string(b)) {
		var l struct {
			Ticket struct {
				RequestID string `json:"request_id"`
			} `json:"ticket"`
		}
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			t.Fatalf("%s: %v: %q", s.jsonl, err, line)
		}
		if l.Ticket.RequestID == id {
			n++
		}
	}
	return n
}
