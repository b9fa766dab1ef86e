package redmine_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"ticketrelay/internal/testwait"
)

// proc is one running binary.
type proc struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	addrs   map[string]string
	done    chan struct{}
	waitErr error
}

// startProc starts bin with args (plus -addr-file) and the environment env
// (nothing of the test's own TICKETRELAY_* variables), logs its stderr to
// dir/name.log and waits until it serves. At the end of the test a running
// process gets SIGINT and must exit 0; its log is shown if the test failed.
func startProc(t *testing.T, dir, name, bin string, args, env []string) *proc {
	t.Helper()
	p := &proc{name: name, logPath: filepath.Join(dir, name+".log"), done: make(chan struct{})}
	addrFile := filepath.Join(dir, name+".addr.json")
	logf, err := os.Create(p.logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	p.cmd = exec.Command(bin, append(args, "-addr-file", addrFile)...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "TICKETRELAY_") {
			p.cmd.Env = append(p.cmd.Env, kv)
		}
	}
	p.cmd.Env = append(p.cmd.Env, env...)
	p.cmd.Stderr = logf
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() { p.waitErr = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		if !p.exited() {
			_ = p.cmd.Process.Signal(os.Interrupt)
			select {
			case <-p.done:
				if p.waitErr != nil {
					t.Errorf("%s did not shut down cleanly on SIGINT: %v", name, p.waitErr)
				}
			case <-time.After(15 * time.Second):
				t.Errorf("%s still running 15s after SIGINT; killing it", name)
				_ = p.cmd.Process.Kill()
				<-p.done
			}
		}
		if t.Failed() {
			b, _ := os.ReadFile(p.logPath)
			t.Logf("----- stderr of %s -----\n%s----- end of %s -----", name, b, name)
		}
	})
	testwait.For(t, 30*time.Second, name+" to write its -addr-file", func() bool {
		if p.exited() {
			t.Fatalf("%s exited before it served: %v", name, p.waitErr)
		}
		b, err := os.ReadFile(addrFile)
		return err == nil && json.Unmarshal(b, &p.addrs) == nil
	})
	return p
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// killedBySIGKILL reports whether the process has exited by SIGKILL.
func (p *proc) killedBySIGKILL() bool {
	if !p.exited() || p.cmd.ProcessState == nil {
		return false
	}
	ws, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}

// stack is a dispatcher and an mcp-front on one data directory, with one
// redmine target and its create tool, and an MCP client.
type stack struct {
	dir, db, cfg string
	env          []string
	n            int
	dispatcher   *proc
	front        *proc
	cs           *mcp.ClientSession
}

const (
	targetName = "tracker"
	toolName   = "open_redmine_issue"
	namespace  = "e2e-redmine"
)

// startStack configures a redmine target toward endpoint (Redmine, or a
// proxy in front of it) and project, starts the dispatcher with env (plus
// the API key) and mcp-front, and connects a client.
func startStack(t *testing.T, endpoint, project string, env ...string) *stack {
	t.Helper()
	s := &stack{dir: t.TempDir()}
	s.db, s.cfg = filepath.Join(s.dir, "tickets.db"), filepath.Join(s.dir, "ticketrelay.yaml")
	config := "key_namespace: " + namespace + "\ntargets:\n" +
		"  - name: " + targetName + "\n    kind: redmine\n    endpoint: " + endpoint + "\n    timeout: 10s\n" +
		"    options: {api_key_env: REDMINE_API_KEY, project: " + project +
		", custom_field_id: " + itoa(server.fieldID) + ", priority_ids: 'low=1, normal=2, high=3, urgent=4'}\n" +
		"tools:\n  - name: " + toolName + "\n    target: " + targetName + "\n    description: Open a Redmine issue.\n"
	if err := os.WriteFile(s.cfg, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	s.env = []string{"REDMINE_API_KEY=" + server.key}
	s.startDispatcher(t, env...)
	s.front = startProc(t, s.dir, "mcp-front", frontBin,
		[]string{"-db", s.db, "-config", s.cfg, "-listen", "127.0.0.1:0", "-metrics-listen", ""}, nil)

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c := mcp.NewClient(&mcp.Implementation{Name: "ticketrelay-e2e-redmine", Version: "1"}, nil)
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{
		Endpoint: "http://" + s.front.addrs["mcp"] + "/mcp", MaxRetries: -1, DisableStandaloneSSE: true,
	}, nil)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { cs.Close() })
	s.cs = cs
	return s
}

// startDispatcher starts a dispatcher of the stack (env: e.g. failpoints).
func (s *stack) startDispatcher(t *testing.T, env ...string) *proc {
	t.Helper()
	s.n++
	s.dispatcher = startProc(t, s.dir, "dispatcher-"+itoa(s.n), dispatcherBin, []string{
		"-data", s.dir, "-db", s.db, "-config", s.cfg,
		"-nats-listen", "127.0.0.1:0", "-metrics-listen", "",
		"-lease-ttl", "2s", "-poll-interval", "5ms",
		"-retry-base", "50ms", "-retry-max", "500ms", "-delivery-timeout", "10s",
	}, append(slices.Clone(s.env), env...))
	return s.dispatcher
}

// createResult is the create tool's answer.
type createResult struct {
	RequestID string `json:"request_id"`
	TicketID  string `json:"ticket_id"`
	Status    string `json:"status"`
}

// status is find_request's answer.
type status struct {
	RequestID   string `json:"request_id"`
	Status      string `json:"status"`
	TicketID    string `json:"ticket_id"`
	Attempts    int    `json:"attempts"`
	LastError   string `json:"last_error"`
	ExternalID  string `json:"external_id"`
	ExternalURL string `json:"external_url"`
	Detail      string `json:"detail"`
}

func (s *stack) call(t *testing.T, tool string, args map[string]any, out any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	res, err := s.cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", tool, err)
	}
	if len(res.Content) != 1 {
		t.Fatalf("%s: %d content items", tool, len(res.Content))
	}
	tc, ok := res.Content[0].(*mcp.TextContent)
	if !ok || res.IsError {
		t.Fatalf("%s: error or unexpected content: %+v", tool, res.Content[0])
	}
	if err := json.Unmarshal([]byte(tc.Text), out); err != nil {
		t.Fatalf("%s: answer %s: %v", tool, tc.Text, err)
	}
}

// create calls the create tool for a new request.
func (s *stack) create(t *testing.T, id, title string) createResult {
	t.Helper()
	var r createResult
	s.call(t, toolName, map[string]any{
		"request_id": id, "title": title, "priority": "high", "labels": []string{"e2e"},
		"body": "The data volume of db-7 is at 100%.\nWrites fail since 03:12.",
	}, &r)
	if r.RequestID != id || r.Status != "queued" || r.TicketID == "" {
		t.Fatalf("create answered %+v; want a queued ticket for %s", r, id)
	}
	return r
}

func (s *stack) find(t *testing.T, id string) status {
	t.Helper()
	var st status
	s.call(t, "find_request", map[string]any{"request_id": id}, &st)
	if st.RequestID != id {
		t.Fatalf("find_request %s answered %+v", id, st)
	}
	return st
}

// settle polls find_request until the request is delivered, failed or
// uncertain.
func (s *stack) settle(t *testing.T, id string, timeout time.Duration) status {
	t.Helper()
	var (
		st   status
		seen []string
	)
	ok := testwait.Until(timeout, func() bool {
		st = s.find(t, id)
		if len(seen) == 0 || seen[len(seen)-1] != st.Status {
			seen = append(seen, st.Status)
		}
		return st.Status == "delivered" || st.Status == "failed" || st.Status == "uncertain"
	})
	if !ok {
		t.Fatalf("request %s not settled after %s (statuses seen: %v); last: %+v", id, timeout, seen, st)
	}
	t.Logf("request %s: statuses %v", id, seen)
	return st
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}
