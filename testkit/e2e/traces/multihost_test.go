package traces_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"ticketrelay/delivery/downstream/webhook/webhooktest"
	"ticketrelay/installation"
	"ticketrelay/testkit/e2eproc"
	"ticketrelay/testkit/natscluster"
	"ticketrelay/testkit/testwait"
)

// startHost is one host of a multi-host installation on cluster, named
// name in its spans (host.name), exporting to j: its own data directory,
// mcp-front configured by frontConfig and dispatcher by dispConfig.
func startHost(t *testing.T, j *jaeger, cluster *natscluster.Cluster, frontConfig, dispConfig, name string) *system {
	t.Helper()
	dir := filepath.Join(t.TempDir(), name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	otel := []string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + j.otlp, "OTEL_TRACES_SAMPLER=parentbased_always_on",
		"OTEL_RESOURCE_ATTRIBUTES=host.name=" + name}
	common := []string{"-nats", cluster.ClientURLs(), "-installation", "traces", "-multi-host",
		"-metrics-listen", "127.0.0.1:0"}
	disp := e2eproc.Start(t, dir, "dispatcher-"+name, dispatcherBin, append([]string{
		"-data", dir, "-config", dispConfig, "-lease-ttl", "2s", "-poll-interval", "5ms", "-host-dead-after", "3s"}, common...),
		append([]string{"HOOK_TOKEN=hook-token"}, otel...), "metrics")
	front := e2eproc.Start(t, dir, "mcp-front-"+name, frontBin, append([]string{
		"-db", filepath.Join(dir, "tickets.db"), "-config", frontConfig, "-listen", "127.0.0.1:0"}, common...),
		otel, "mcp", "metrics")
	return &system{front: front, disp: disp}
}

// TestAdoptionIsLinkedToTheAcceptingCall accepts a ticket on host a whose
// dispatcher was SIGKILLed, so that only the cluster record and a's
// outbox hold it; host b adopts and delivers it. Decision 0162: the
// adoption is a new trace, linked to the call that accepted the ticket,
// and b's publish, attempt and HTTP call, and the downstream, continue the
// adoption's trace. An operator reading the ticket's trace finds the link
// to the delivery on the other host; the accepting trace itself ends with
// the call.
func TestAdoptionIsLinkedToTheAcceptingCall(t *testing.T) {
	needJaeger(t)
	j := startJaeger(t)
	d := newDownstream(t, j, 0)
	cluster := natscluster.StartTest(t, natscluster.Config{})
	config := writeConfig(t, t.TempDir(), "", d)
	a := startHost(t, j, cluster, config, config, "a")
	startHost(t, j, cluster, config, config, "b")

	// a's dispatcher dies: what a's front accepts stays in a's outbox, for
	// b to adopt once a has been silent for -host-dead-after.
	a.disp.Kill9()
	<-a.disp.Done()
	ticketID := a.create(t, "traces-adopt-1", mcp.Meta{"traceparent": "00-" + callerTrace + "-" + callerSpan + "-01"}, "")

	testwait.For(t, 60*time.Second, "the downstream called by b", func() bool { return len(d.calls()) >= 1 })
	calls := d.calls()
	if len(calls) != 1 {
		t.Fatalf("the downstream got %d calls, want 1: %q", len(calls), calls)
	}
	parts := strings.Split(calls[0], "-")
	if len(parts) != 4 {
		t.Fatalf("the downstream's call carried traceparent %q", calls[0])
	}
	adoptTrace := parts[1]
	if adoptTrace == callerTrace {
		t.Fatalf("b delivered in the accepting call's trace %s: want the adoption's own trace, linked", callerTrace)
	}

	// The accepting trace: a's tool call and its claim, and no delivery.
	accepted := j.waitTrace(t, callerTrace, "a's tool call and claim", func(tr jtrace) bool {
		for _, s := range tr.Spans {
			if s.OperationName == "cluster claim" {
				return true
			}
		}
		return false
	})
	call := span(t, accepted, "mcp-front", "tools/call create_in_ops_hook")
	if got := call.tag("ticketrelay.ticket_id"); got != ticketID {
		t.Errorf("tool call span's ticket id %q, want %q", got, ticketID)
	}
	claim := span(t, accepted, "mcp-front", "cluster claim")
	if !childOf(claim, callerTrace, call.SpanID) {
		t.Errorf("the claim is not a child of the tool call %s: %+v", call.SpanID, claim.References)
	}
	for _, s := range accepted.Spans {
		if accepted.service(s) == "dispatcher" {
			t.Errorf("the accepting trace holds the dispatcher's %s: a's dispatcher was dead", s.OperationName)
		}
		if h := accepted.host(s); h != "a" {
			t.Errorf("the accepting trace holds %s/%s of host %q, want a's only", accepted.service(s), s.OperationName, h)
		}
	}

	// The adoption's trace: b adopts, linked to the accepting call's
	// trace, and delivers in it, down to the downstream's server span.
	adopted := j.waitTrace(t, adoptTrace, "b's adoption and delivery", func(tr jtrace) bool {
		return wholeDelivery(tr) && hasOp(tr, "cluster adopt")
	})
	adopt := span(t, adopted, "dispatcher", "cluster adopt")
	if !linkedTo(adopt, callerTrace) {
		t.Errorf("the adoption does not link to the accepting trace %s: %+v", callerTrace, adopt.References)
	}
	if got := adopt.tag("ticketrelay.adopted_from"); got == "" {
		t.Errorf("the adoption does not name the host it adopted from: %v", adopt.Tags)
	}
	for _, s := range adopted.Spans {
		if svc := adopted.service(s); svc != "downstream-fake" && adopted.host(s) != "b" {
			t.Errorf("the adoption's trace holds %s/%s of host %q, want b's", svc, s.OperationName, adopted.host(s))
		}
	}
	attempt := span(t, adopted, "dispatcher", "deliver ops-hook")
	if got := attempt.tag("ticketrelay.outcome"); got != "delivered" {
		t.Errorf("b's attempt outcome %q, want delivered", got)
	}
	if linkedTo(attempt, "") {
		t.Errorf("b's first attempt is linked, not a child of its publish: %+v", attempt.References)
	}
	span(t, adopted, "downstream-fake", "POST "+webhooktest.Path)
}

// TestDeliveryOnAnotherHostIsOneTrace accepts a ticket on host a, whose
// relay publishes it, and has host b's forwarder deliver it: a's
// dispatcher is configured with another target only, so b's is the one
// forwarder that consumes ops-hook's messages. No host is lost and nothing
// is adopted: the NATS message's traceparent is all that carries the trace
// from a to b. One trace, the caller's, holds a's tool call, a's publish,
// b's attempt and HTTP call and the downstream's server span, each a child
// of the one before, each naming the host that did it.
func TestDeliveryOnAnotherHostIsOneTrace(t *testing.T) {
	needJaeger(t)
	j := startJaeger(t)
	d := newDownstream(t, j, 0)
	cluster := natscluster.StartTest(t, natscluster.Config{})
	dir := t.TempDir()
	config := writeConfig(t, dir, "", d)
	spare := filepath.Join(dir, "spare.yaml")
	if err := os.WriteFile(spare, []byte("targets:\n"+
		"  - name: spare-hook\n    kind: webhook\n    endpoint: "+fmt.Sprintf("%q", d.url)+"\n    timeout: 5s\n"+
		"    options: {token_env: HOOK_TOKEN}\n"+
		"tools:\n  - name: create_in_spare_hook\n    target: spare-hook\n    description: File the ticket in spare-hook.\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	a := startHost(t, j, cluster, config, spare, "a")
	startHost(t, j, cluster, config, config, "b")

	ticketID := a.create(t, "traces-cross-1", mcp.Meta{"traceparent": "00-" + callerTrace + "-" + callerSpan + "-01"}, "")
	testwait.For(t, 60*time.Second, "the downstream called by b", func() bool { return len(d.calls()) >= 1 })
	if calls := d.calls(); len(calls) != 1 || !strings.Contains(calls[0], callerTrace) {
		t.Fatalf("the downstream's calls carried %q, want one in the caller's trace %s", calls, callerTrace)
	}

	tr := j.waitTrace(t, callerTrace, "a's call and publish, b's delivery", func(tr jtrace) bool {
		return hasOp(tr, "tools/call create_in_ops_hook") && wholeDelivery(tr) && attemptEnded("delivered")(tr)
	})
	call := span(t, tr, "mcp-front", "tools/call create_in_ops_hook")
	publish := span(t, tr, "dispatcher", publishOp)
	attempt := span(t, tr, "dispatcher", "deliver ops-hook")
	httpCall := span(t, tr, "dispatcher", "HTTP POST")
	server := span(t, tr, "downstream-fake", "POST "+webhooktest.Path)
	if got := call.tag("ticketrelay.ticket_id"); got != ticketID {
		t.Errorf("tool call span's ticket id %q, want %q", got, ticketID)
	}
	for _, c := range []struct {
		child, parent jspan
	}{{call, jspan{SpanID: callerSpan}}, {publish, call}, {attempt, publish}, {httpCall, attempt}, {server, httpCall}} {
		if !childOf(c.child, callerTrace, c.parent.SpanID) {
			t.Errorf("%s is not a child of %s (span %s): %+v", c.child.OperationName, c.parent.OperationName, c.parent.SpanID, c.child.References)
		}
	}
	// Which host did what: the process's host.name, and the span's own
	// ticketrelay.host where a step may run on any host.
	for _, c := range []struct {
		s    jspan
		host string
	}{{call, "a"}, {publish, "a"}, {attempt, "b"}, {httpCall, "b"}} {
		if got := tr.host(c.s); got != c.host {
			t.Errorf("%s ran on host %q, want %s", c.s.OperationName, got, c.host)
		}
	}
	for _, c := range []struct {
		s    jspan
		host string
	}{{publish, "a"}, {attempt, "b"}} {
		if got := c.s.tag("ticketrelay.host"); got != c.host {
			t.Errorf("%s names host %q, want %s", c.s.OperationName, got, c.host)
		}
	}
	if got := attempt.tag("ticketrelay.outcome"); got != "delivered" {
		t.Errorf("b's attempt outcome %q, want delivered", got)
	}
	if hasOp(tr, "cluster adopt") {
		t.Errorf("the ticket was adopted, not delivered across hosts:\n%s", describe(tr))
	}
}

// publishOp is the relay's publish span on the hosts' installation: named
// by the subject the message goes out on.
var publishOp = "publish " + installation.Name("traces").Subject("ops-hook")

// wholeDelivery reports whether tr holds the dispatcher's half of one
// ticket's path: the relay's publish, the forwarder's attempt and its
// HTTP call, and the downstream's server span.
func wholeDelivery(tr jtrace) bool {
	return hasOp(tr, publishOp) && hasOp(tr, "deliver ops-hook") &&
		hasOp(tr, "HTTP POST") && hasOp(tr, "POST "+webhooktest.Path)
}

// hasOp reports whether tr holds a span named op.
func hasOp(tr jtrace, op string) bool {
	for _, s := range tr.Spans {
		if s.OperationName == op {
			return true
		}
	}
	return false
}

// host is the host.name of s's process.
func (tr jtrace) host(s jspan) string {
	for _, g := range tr.Processes[s.ProcessID].Tags {
		if g.Key == "host.name" {
			return fmt.Sprint(g.Value)
		}
	}
	return ""
}
