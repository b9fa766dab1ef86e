package multihost_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
	"time"

	"ticketrelay/store/trail"
	"ticketrelay/testkit/e2eproc"
	"ticketrelay/testkit/testwait"
)

// audit runs `dispatcher audit -json` as an operator would: on host h's
// database, or with h nil on the installation's trail stream
// (-multi-host), and decodes its lines.
func (in *installation) audit(t *testing.T, h *host, extra ...string) []trail.Entry {
	t.Helper()
	args := []string{"audit", "-json", "-multi-host", "-nats", in.cluster.ClientURLs(), "-installation", installationName}
	if h != nil {
		args = []string{"audit", "-json", "-data", h.dir}
	}
	cmd := exec.Command(dispatcherBin, append(args, extra...)...)
	cmd.Env = e2eproc.Environ()
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("audit %v: %v\n%s", args, err, errOut.String())
	}
	var entries []trail.Entry
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		var e trail.Entry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("audit line %q: %v", sc.Text(), err)
		}
		entries = append(entries, e)
	}
	return entries
}

// TestTrailOfEveryHost: each host's trail holds the calls it served, and
// `dispatcher audit -multi-host` reads every host's, shipped to the
// installation's replicated trail stream, in one place; an operator's
// forget-host is recorded there too.
func TestTrailOfEveryHost(t *testing.T) {
	in := newInstallation(t)
	a := in.startHost(t, "a")
	b := in.startHost(t, "b")
	first := a.mustCall(t, "send_hook", args("trail-1", "Filed on a"))
	b.mustCall(t, "send_hook", args("trail-2", "Filed on b"))
	if again := b.mustCall(t, "send_hook", args("trail-1", "Filed on a")); !again.Replayed || again.TicketID != first.TicketID {
		t.Fatalf("the retry on b: %+v", again)
	}

	// Each host's own trail: what it served, and nothing else.
	var onA, onB []trail.Entry
	if !testwait.Until(20*time.Second, func() bool {
		onA, onB = in.audit(t, a), in.audit(t, b)
		return len(onA) >= 1 && len(onB) >= 2
	}) {
		t.Fatalf("each host's trail, after 20s: a %+v, b %+v", onA, onB)
	}
	if len(onA) != 1 || onA[0].RequestID != "trail-1" || onA[0].Outcome != trail.Accepted {
		t.Errorf("host a's trail: %+v", onA)
	}
	if len(onB) != 2 || onB[0].RequestID != "trail-2" || onB[0].Outcome != trail.Accepted ||
		onB[1].RequestID != "trail-1" || onB[1].Outcome != trail.Replayed {
		t.Errorf("host b's trail: %+v", onB)
	}

	// One place for all: the stream, each entry naming its host.
	var all []trail.Entry
	testwait.For(t, 30*time.Second, "every host's entries in the trail stream", func() bool {
		all = in.audit(t, nil)
		return len(all) >= 3
	})
	hosts := map[string][]string{}
	for _, e := range all {
		hosts[e.Host] = append(hosts[e.Host], e.RequestID+" "+e.Outcome)
	}
	if len(all) != 3 || len(hosts) != 2 || hosts[""] != nil {
		t.Fatalf("the trail stream: %d entries from hosts %v; want 3 from 2 hosts", len(all), hosts)
	}
	for host, got := range hosts {
		sort := strings.Join(got, ", ")
		if sort != "trail-1 accepted" && sort != "trail-2 accepted, trail-1 replayed" {
			t.Errorf("host %s shipped %s", host, sort)
		}
	}
	if only := in.audit(t, nil, "-request-id", "trail-1", "-outcome", "replayed"); len(only) != 1 {
		t.Errorf("audit -multi-host -request-id trail-1 -outcome replayed: %+v", only)
	}

	// An operator's forget-host (refused: the host is live) is recorded
	// in the stream under the operator's name.
	statusOut := in.statusJSON(t, a)
	live := statusOut.Cluster.Hosts[0].Host
	cmd := exec.Command(dispatcherBin, "forget-host", "-operator", "carol", "-nats", in.cluster.ClientURLs(), "-installation", installationName, live)
	cmd.Env = e2eproc.Environ()
	if out, err := cmd.CombinedOutput(); err == nil {
		t.Fatalf("forget-host of a live host succeeded: %s", out)
	}
	ops := in.audit(t, nil, "-tool", "forget-host")
	if len(ops) != 1 || ops[0].Subject != "carol" || ops[0].Kind != trail.KindOperator || ops[0].Outcome != trail.Failed ||
		!strings.Contains(ops[0].Reason, live) {
		t.Errorf("forget-host in the trail stream: %+v", ops)
	}
}
