package multihost_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"ticketrelay/downstream/slack/slacktest"
	"ticketrelay/downstream/webhook/webhooktest"
	"ticketrelay/internal/e2eproc"
	"ticketrelay/internal/natscluster"
	"ticketrelay/internal/testwait"
)

const installationName = "mh"

// installation is a cluster, the shared downstream fakes and the
// configuration every host runs with.
type installation struct {
	cluster *natscluster.Cluster
	hook    *webhooktest.Fake // keyed
	slack   *slacktest.Fake   // unkeyed, no lookup
	config  string
	env     []string
}

func newInstallation(t *testing.T) *installation {
	t.Helper()
	in := &installation{
		cluster: natscluster.StartTest(t, natscluster.Config{}),
		hook:    webhooktest.New(t, webhooktest.Options{}),
		slack:   slacktest.New(t),
	}
	in.config = filepath.Join(t.TempDir(), "ticketrelay.yaml")
	yaml := fmt.Sprintf(`targets:
  - {name: hook, kind: webhook, endpoint: %q, timeout: 5s}
  - {name: chat, kind: slack, timeout: 5s, options: {webhook_url_env: MH_SLACK_URL}}
tools:
  - {name: send_hook, target: hook}
  - {name: notify_chat, target: chat}
`, in.hook.URL())
	if err := os.WriteFile(in.config, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	in.env = []string{"MH_SLACK_URL=" + in.slack.URL()}
	return in
}

// host is one host of the installation: its own data directory and
// SQLite file, its own dispatcher and mcp-front.
type host struct {
	name  string
	dir   string
	disp  *e2eproc.Proc
	front *e2eproc.Proc
	url   string
	cs    *mcp.ClientSession
}

func (in *installation) startHost(t *testing.T, name string) *host {
	t.Helper()
	h := &host{name: name, dir: filepath.Join(t.TempDir(), name)}
	if err := os.MkdirAll(h.dir, 0o700); err != nil {
		t.Fatal(err)
	}
	common := []string{"-nats", in.cluster.ClientURLs(), "-installation", installationName, "-multi-host",
		"-config", in.config, "-metrics-listen", "127.0.0.1:0"}
	h.disp = e2eproc.Start(t, h.dir, "dispatcher-"+name, dispatcherBin, append([]string{
		"-data", h.dir, "-lease-ttl", "2s", "-poll-interval", "5ms"}, common...), in.env, "metrics")
	h.front = e2eproc.Start(t, h.dir, "mcp-front-"+name, frontBin, append([]string{
		"-db", filepath.Join(h.dir, "tickets.db"), "-listen", "127.0.0.1:0"}, common...), nil, "mcp", "metrics")
	h.url = "http://" + h.front.Addr("mcp") + "/mcp"
	h.cs = e2eproc.Connect(t, h.url)
	return h
}

type answer struct {
	RequestID   string `json:"request_id"`
	TicketID    string `json:"ticket_id"`
	Status      string `json:"status"`
	Replayed    bool   `json:"replayed"`
	ExternalID  string `json:"external_id"`
	Detail      string `json:"detail"`
	CreatedAt   string `json:"created_at"`
	AcceptedAt  string `json:"accepted_at"`
	ExternalURL string `json:"external_url"`
}

// call calls tool on h and decodes its answer; a tool error is returned as
// an error carrying its text.
func (h *host) call(t *testing.T, tool string, args map[string]any) (answer, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	res, err := h.cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("%s on %s: %v", tool, h.name, err)
	}
	text := res.Content[0].(*mcp.TextContent).Text
	if res.IsError {
		return answer{}, fmt.Errorf("%s", text)
	}
	var a answer
	if err := json.Unmarshal([]byte(text), &a); err != nil {
		t.Fatalf("%s on %s: %q: %v", tool, h.name, text, err)
	}
	return a, nil
}

func (h *host) mustCall(t *testing.T, tool string, args map[string]any) answer {
	t.Helper()
	a, err := h.call(t, tool, args)
	if err != nil {
		t.Fatalf("%s %v on %s: %v", tool, args["request_id"], h.name, err)
	}
	return a
}

func args(id, title string) map[string]any { return map[string]any{"request_id": id, "title": title} }

// waitStatus waits until find_request on h says status for id.
func (h *host) waitStatus(t *testing.T, id, status string, timeout time.Duration) answer {
	t.Helper()
	var last answer
	if !testwait.Until(timeout, func() bool {
		last = h.mustCall(t, "find_request", map[string]any{"request_id": id})
		return last.Status == status
	}) {
		t.Fatalf("find_request %s on %s: %s (%s) after %s, want %s", id, h.name, last.Status, last.Detail, timeout, status)
	}
	return last
}

// One request, one answer, on every host: a retry on another host
// replays, other arguments conflict naming the original ticket, every
// host's forwarder may deliver it, and find_request agrees everywhere.
// Each ticket reaches a keyed and an unkeyed downstream exactly once.
func TestOneAnswerOnEveryHost(t *testing.T) {
	in := newInstallation(t)
	a, b := in.startHost(t, "a"), in.startHost(t, "b")

	first := a.mustCall(t, "send_hook", args("mh-1", "Checkout fails"))
	if first.Replayed {
		t.Fatalf("first call replayed: %+v", first)
	}
	again := b.mustCall(t, "send_hook", args("mh-1", "Checkout fails"))
	if !again.Replayed || again.TicketID != first.TicketID || again.CreatedAt != first.CreatedAt {
		t.Fatalf("retry on b = %+v; want a replay of %+v", again, first)
	}
	if _, err := b.call(t, "send_hook", args("mh-1", "Another title")); err == nil ||
		!strings.Contains(err.Error(), "idempotency_key_conflict") || !strings.Contains(err.Error(), first.TicketID) {
		t.Fatalf("other arguments on b: %v; want a conflict naming %s", err, first.TicketID)
	}
	if st := b.mustCall(t, "find_request", map[string]any{"request_id": "never-sent"}); st.Status != "unknown" {
		t.Errorf("find_request of an unknown id on b: %+v", st)
	}
	da := a.waitStatus(t, "mh-1", "delivered", 30*time.Second)
	db := b.waitStatus(t, "mh-1", "delivered", 30*time.Second)
	if da.ExternalID == "" || da.ExternalID != db.ExternalID || da.TicketID != db.TicketID {
		t.Errorf("hosts disagree: a %+v, b %+v", da, db)
	}

	// A batch, alternating hosts, each retried on the other host.
	hosts := []*host{a, b}
	var ids []string
	for i := range 20 {
		id := fmt.Sprintf("mh-batch-%02d", i)
		ids = append(ids, id)
		tool := []string{"send_hook", "notify_chat"}[i%2]
		x, y := hosts[i%2], hosts[(i+1)%2]
		r1 := x.mustCall(t, tool, args(id, "batch "+id))
		r2 := y.mustCall(t, tool, args(id, "batch "+id))
		if r1.Replayed || !r2.Replayed || r1.TicketID != r2.TicketID {
			t.Fatalf("%s: first %+v, retry on the other host %+v", id, r1, r2)
		}
	}
	for _, id := range ids {
		sa := a.waitStatus(t, id, "delivered", 30*time.Second)
		sb := b.waitStatus(t, id, "delivered", 30*time.Second)
		if sa.TicketID != sb.TicketID || sa.ExternalID != sb.ExternalID {
			t.Errorf("%s: a says %+v, b says %+v", id, sa, sb)
		}
	}
	keys := map[string]int{}
	for _, d := range in.hook.Deliveries() {
		keys[d.Key]++
	}
	for k, n := range keys {
		if n != 1 {
			t.Errorf("webhook received key %s %d times", k, n)
		}
	}
	if len(keys) != 11 {
		t.Errorf("webhook received %d keys, want 11", len(keys))
	}
	if n := in.slack.Count(); n != 10 {
		t.Errorf("slack received %d messages, want 10", n)
	}
}
