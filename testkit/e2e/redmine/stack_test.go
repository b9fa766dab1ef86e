package redmine_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"ticketrelay/testkit/e2eproc"
	"ticketrelay/testkit/testwait"
)

// stack is a dispatcher and an mcp-front on one data directory, with one
// redmine target and its create tool, and an MCP client.
type stack struct {
	dir, db, cfg string
	env          []string
	n            int
	dispatcher   *e2eproc.Proc
	front        *e2eproc.Proc
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
	s.front = e2eproc.Start(t, s.dir, "mcp-front", frontBin,
		[]string{"-db", s.db, "-config", s.cfg, "-listen", "127.0.0.1:0", "-metrics-listen", ""}, nil, "mcp")
	s.cs = e2eproc.Connect(t, "http://"+s.front.Addr("mcp")+"/mcp")
	return s
}

// startDispatcher starts a dispatcher of the stack (env: e.g. failpoints).
func (s *stack) startDispatcher(t *testing.T, env ...string) *e2eproc.Proc {
	t.Helper()
	s.n++
	s.dispatcher = e2eproc.Start(t, s.dir, "dispatcher-"+itoa(s.n), dispatcherBin, []string{
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

// create calls the create tool for a new request.
func (s *stack) create(t *testing.T, id, title string) createResult {
	t.Helper()
	var r createResult
	e2eproc.CallTool(t, s.cs, toolName, map[string]any{
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
	e2eproc.CallTool(t, s.cs, "find_request", map[string]any{"request_id": id}, &st)
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
