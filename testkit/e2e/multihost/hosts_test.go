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

	"ticketrelay/delivery/downstream/slack/slacktest"
	"ticketrelay/delivery/downstream/webhook/webhooktest"
	"ticketrelay/testkit/e2eproc"
	"ticketrelay/testkit/natscluster"
	"ticketrelay/testkit/testwait"
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

func (in *installation) startHost(t *testing.T, name string, dispArgs ...string) *host {
	t.Helper()
	return in.startHostWith(t, name, nil, dispArgs...)
}

// startHostWith is startHost with frontEnv in its mcp-front's environment
// (a failpoint).
func (in *installation) startHostWith(t *testing.T, name string, frontEnv []string, dispArgs ...string) *host {
	t.Helper()
	h := &host{name: name, dir: filepath.Join(t.TempDir(), name)}
	if err := os.MkdirAll(h.dir, 0o700); err != nil {
		t.Fatal(err)
	}
	common := []string{"-nats", in.cluster.ClientURLs(), "-installation", installationName, "-multi-host",
		"-config", in.config, "-metrics-listen", "127.0.0.1:0"}
	h.disp = e2eproc.Start(t, h.dir, "dispatcher-"+name, dispatcherBin, append([]string{
		"-data", h.dir, "-lease-ttl", "2s", "-poll-interval", "5ms"}, append(common, dispArgs...)...), in.env, "metrics")
	h.front = e2eproc.Start(t, h.dir, "mcp-front-"+name, frontBin, append([]string{
		"-db", filepath.Join(h.dir, "tickets.db"), "-listen", "127.0.0.1:0"}, common...), frontEnv, "mcp", "metrics")
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

// call calls tool on h and decodes its answer; a tool error, or a call
// that failed, is returned as an error carrying its text.
func (h *host) call(t *testing.T, tool string, args map[string]any) (answer, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	res, err := h.cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		// Not t.Fatal: callers run on other goroutines too.
		return answer{}, fmt.Errorf("%s on %s: the call itself failed (retry): %w", tool, h.name, err)
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

// A host lost for good, data directory and all, after it answered
// requests it never handed to the stream: the other host publishes and
// delivers every one of them, exactly once, once the lost host has been
// silent for -host-dead-after.
func TestHostLostForGood(t *testing.T) {
	in := newInstallation(t)
	a := in.startHost(t, "a", "-host-dead-after", "3s")
	b := in.startHost(t, "b", "-host-dead-after", "3s")
	a.waitStatus(t, "warm-up", "unknown", 10*time.Second)

	// b's dispatcher dies first: what b's front accepts from now on stays
	// in b's outbox.
	b.disp.Kill9()
	<-b.disp.Done()
	var ids []string
	for i := range 10 {
		id := fmt.Sprintf("lost-%02d", i)
		ids = append(ids, id)
		if r := b.mustCall(t, []string{"send_hook", "notify_chat"}[i%2], args(id, "accepted by b "+id)); r.Replayed {
			t.Fatalf("%s: %+v", id, r)
		}
	}
	for _, id := range ids {
		if st := a.mustCall(t, "find_request", map[string]any{"request_id": id}); st.Status != "queued" {
			t.Fatalf("%s on a before b is lost: %s (%s), want queued", id, st.Status, st.Detail)
		}
	}
	// Then the host is lost for good.
	b.front.Kill9()
	if err := os.RemoveAll(b.dir); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for _, id := range ids {
		a.waitStatus(t, id, "delivered", 60*time.Second)
	}
	t.Logf("every ticket b left was delivered %s after b was lost", time.Since(start).Round(100*time.Millisecond))
	keys := map[string]int{}
	for _, d := range in.hook.Deliveries() {
		keys[d.Key]++
	}
	if len(keys) != 5 {
		t.Errorf("webhook received %d keys, want 5", len(keys))
	}
	for k, n := range keys {
		if n != 1 {
			t.Errorf("webhook received %s %d times", k, n)
		}
	}
	if n := in.slack.Count(); n != 5 {
		t.Errorf("slack received %d messages, want 5", n)
	}
}

// Calls keep being answered, exactly once each, while the bucket's and the
// stream's leaders are SIGKILLed and SIGSTOPped: a call that fails is
// retried, with the same request_id and arguments, on the other host, as a
// client behind a load balancer would. Reports the longest time no call
// was accepted.
func TestLeadersKilledMidCalls(t *testing.T) {
	if testing.Short() {
		t.Skip("elections take seconds each")
	}
	in := newInstallation(t)
	a, b := in.startHost(t, "a"), in.startHost(t, "b")
	hosts := []*host{a, b}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	type result struct{ id, ticket string }
	done := make(chan []result)
	stop := make(chan struct{})
	var longest time.Duration
	go func() {
		var out []result
		last := time.Now()
		for i := 0; ; i++ {
			select {
			case <-stop:
				done <- out
				return
			default:
			}
			id := fmt.Sprintf("ldr-%03d", i)
			for try := 0; ctx.Err() == nil; try++ {
				r, err := hosts[(i+try)%2].call(t, "send_hook", args(id, "during elections "+id))
				if err == nil {
					out = append(out, result{id, r.TicketID})
					longest = max(longest, time.Since(last))
					last = time.Now()
					break
				}
				if !strings.Contains(err.Error(), "Retry") && !strings.Contains(err.Error(), "retry") {
					t.Errorf("%s: an error that does not say to retry: %v", id, err)
				}
			}
		}
	}()
	waitAccepted := func(n int) {
		// Let some calls through between faults.
		testwait.For(t, 60*time.Second, "calls accepted", func() bool { return in.hook.Count() >= n })
	}
	waitAccepted(5)
	kv, err := in.cluster.KVLeader(ctx, "ticketrelay-"+installationName+"-requests")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("SIGKILL of the bucket leader n%d", kv+1)
	if err := in.cluster.Kill(kv); err != nil {
		t.Fatal(err)
	}
	waitAccepted(in.hook.Count() + 10)
	if err := in.cluster.Restart(ctx, kv); err != nil {
		t.Fatal(err)
	}
	// One fault at a time: the restarted node must be a current replica
	// again before another node stops, or two of three are out.
	if err := in.cluster.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	st, err := in.cluster.StreamLeader(ctx, "ticketrelay-"+installationName)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("SIGSTOP of the stream leader n%d", st+1)
	if err := in.cluster.Stop(st); err != nil {
		t.Fatal(err)
	}
	waitAccepted(in.hook.Count() + 10)
	if err := in.cluster.Cont(st); err != nil {
		t.Fatal(err)
	}
	if err := in.cluster.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	waitAccepted(in.hook.Count() + 5)
	close(stop)
	results := <-done
	t.Logf("%d calls accepted; longest time with no call accepted: %s", len(results), longest.Round(100*time.Millisecond))
	for _, r := range results {
		sa := a.waitStatus(t, r.id, "delivered", 60*time.Second)
		if sa.TicketID != r.ticket {
			t.Errorf("%s: answered ticket %s, find_request says %s", r.id, r.ticket, sa.TicketID)
		}
		if sb := b.mustCall(t, "find_request", map[string]any{"request_id": r.id}); sb.TicketID != sa.TicketID || sb.Status != "delivered" {
			t.Errorf("%s: a says %+v, b says %+v", r.id, sa, sb)
		}
	}
	keys := map[string]int{}
	for _, d := range in.hook.Deliveries() {
		keys[d.Key]++
	}
	for k, n := range keys {
		if n != 1 {
			t.Errorf("webhook received %s %d times", k, n)
		}
	}
	if len(keys) != len(results) {
		t.Errorf("webhook holds %d keys for %d accepted calls", len(keys), len(results))
	}
}
