package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"ticketrelay/testkit/e2eproc"
	"ticketrelay/testkit/fixture"
)

// startSharedNATS runs a nats-server with JetStream that several
// installations share (as an external server would be), stopped at cleanup.
func startSharedNATS(t *testing.T) string {
	t.Helper()
	return fixture.StartNATS(t).URL
}

// startOnShared starts s's dispatcher on the shared server url as
// installation inst, and its mcp-front.
func (s *stack) startOnShared(t *testing.T, url, inst string) {
	t.Helper()
	s.disp = e2eproc.Start(t, s.dir, s.instance("dispatcher"), dispatcherBin, []string{
		"-data", s.dir, "-db", s.db, "-nats", url, "-installation", inst,
		"-metrics-listen", "127.0.0.1:0", "-lease-ttl", "2s", "-poll-interval", "5ms",
	}, nil, "metrics")
	s.startFront(t, "127.0.0.1:0")
}

// Two installations on one NATS server each deliver all of their own
// tickets and none of the other's, even with the same request ids; a
// second host that claims an installation already used by a host with
// another ledger is refused with one line, and takes nothing.
func TestInstallationsOnOneServerStayApart(t *testing.T) {
	url := startSharedNATS(t)
	a, b := newStack(t), newStack(t)
	a.startOnShared(t, url, "team-a")
	b.startOnShared(t, url, "team-b")
	ca, cb := e2eproc.Connect(t, a.url), e2eproc.Connect(t, b.url)

	const n = 40
	var ids []string
	for i := range n {
		id := fmt.Sprintf("same-id-%02d", i) // both installations choose it
		ids = append(ids, id)
		mustCreate(t, ca, ticketArgs(id, "team a's ticket "+id))
		mustCreate(t, cb, ticketArgs(id, "team b's ticket "+id))
	}
	waitDelivered(t, ca, deliverTimeout, ids...)
	waitDelivered(t, cb, deliverTimeout, ids...)
	for _, c := range []struct {
		s    *stack
		mine string
	}{{a, "team a's"}, {b, "team b's"}} {
		lines := readJSONL(t, c.s.jsonl)
		if len(lines) != n {
			t.Errorf("installation of %s tickets delivered %d tickets, want %d", c.mine, len(lines), n)
		}
		for _, id := range ids {
			if k := linesFor(lines, id); k != 1 {
				t.Errorf("%s: %d tickets for %s, want 1", c.mine, k, id)
			}
		}
		for _, l := range lines {
			if !strings.HasPrefix(l.Ticket.Title, c.mine) {
				t.Errorf("the installation of %s tickets delivered %q", c.mine, l.Ticket.Title)
			}
		}
		if m := scrape(t, c.s.disp); m.Get("ticketrelay_redeliveries_skipped_total") != 0 {
			t.Errorf("%s: the forwarder skipped %v messages (another installation's?)", c.mine, m.Get("ticketrelay_redeliveries_skipped_total"))
		}
	}

	// A third host, its own ledger, names team-a: refused before it
	// touches anything.
	c := newStack(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := e2eproc.Launch(ctx, c.dir, e2eproc.Spec{Name: "dispatcher-intruder", Bin: dispatcherBin, Args: []string{
		"-data", c.dir, "-db", c.db, "-nats", url, "-installation", "team-a", "-metrics-listen", "127.0.0.1:0",
	}, Want: []string{"metrics"}})
	if err == nil {
		p.Kill9()
		t.Fatal("a second host with its own ledger started on installation team-a")
	}
	if !strings.Contains(err.Error(), "belongs to someone else") || !strings.Contains(err.Error(), "-installation") {
		t.Errorf("the refusal does not say why and what to do: %v", err)
	}
	// And -nats without an installation name is refused as well.
	p, err = e2eproc.Launch(ctx, c.dir, e2eproc.Spec{Name: "dispatcher-unnamed", Bin: dispatcherBin, Args: []string{
		"-data", c.dir, "-db", c.db, "-nats", url, "-metrics-listen", "127.0.0.1:0",
	}, Want: []string{"metrics"}})
	if err == nil {
		p.Kill9()
		t.Fatal("-nats without -installation started")
	}
	if !strings.Contains(err.Error(), "-nats needs -installation") {
		t.Errorf("-nats without -installation: %v", err)
	}
	// The two installations are untouched: one more ticket each still goes.
	mustCreate(t, ca, ticketArgs("after-intruder", "team a's last"))
	waitDelivered(t, ca, deliverTimeout, "after-intruder")
}
