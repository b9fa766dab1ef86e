package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"ticketrelay/testkit/e2eproc"
	"ticketrelay/ticket"
)

// Two token subjects choose the same request ids over real HTTP: each gets
// its own ticket, delivered exactly once, and no field of one subject's
// request ever reaches the other (status, replay, conflict).
func TestSubjectsWithTheSameRequestIDsStayApart(t *testing.T) {
	s := newStack(t)
	tokens := filepath.Join(s.dir, "tokens")
	const aliceToken, bobToken = "alice-token-0123456789abcdef", "bob-token-0123456789abcdef"
	if err := os.WriteFile(tokens, []byte("alice:"+aliceToken+"\nbob:"+bobToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s.startDispatcher(t)
	s.front = e2eproc.Start(t, s.dir, s.instance("mcp-front"), frontBin, []string{
		"-db", s.db, "-listen", "127.0.0.1:0", "-metrics-listen", "127.0.0.1:0", "-auth-tokens-file", tokens,
	}, []string{"TICKETRELAY_AUTH_TOKENS="}, "mcp", "metrics")
	s.url = "http://" + s.front.Addr("mcp") + "/mcp"
	dial := func(token string) *mcp.ClientSession {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		cs, err := e2eproc.DialAs(ctx, s.url, token)
		if err != nil {
			t.Fatalf("connect: %v", err)
		}
		t.Cleanup(func() { cs.Close() })
		return cs
	}
	alice, bob := dial(aliceToken), dial(bobToken)

	ids := []string{"shared-1", "shared-2", "shared-3"}
	first := map[string][2]createResult{}
	for _, id := range ids {
		a := mustCreate(t, alice, ticketArgs(id, "alice secret title "+id))
		b := mustCreate(t, bob, ticketArgs(id, "bob title "+id))
		if a.Replayed || b.Replayed {
			t.Fatalf("%s: alice replayed=%v, bob replayed=%v; want two new requests", id, a.Replayed, b.Replayed)
		}
		if a.TicketID == b.TicketID {
			t.Fatalf("%s: both subjects got ticket %s", id, a.TicketID)
		}
		if a.Caller == nil || a.Caller.Subject != "alice" || b.Caller == nil || b.Caller.Subject != "bob" {
			t.Fatalf("%s: callers %+v and %+v; want alice's and bob's", id, a.Caller, b.Caller)
		}
		first[id] = [2]createResult{a, b}
	}
	// A retry replays the caller's own; other arguments conflict with the
	// caller's own ticket and never name the other's.
	for _, id := range ids {
		again := mustCreate(t, bob, ticketArgs(id, "bob title "+id))
		if !again.Replayed || again.TicketID != first[id][1].TicketID {
			t.Errorf("bob's retry of %s = %+v; want a replay of %s", id, again, first[id][1].TicketID)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := create(ctx, bob, ticketArgs(id, "alice secret title "+id))
		cancel()
		if err == nil || !strings.Contains(err.Error(), "idempotency_key_conflict") ||
			!strings.Contains(err.Error(), first[id][1].TicketID) || strings.Contains(err.Error(), first[id][0].TicketID) {
			t.Errorf("bob's %s with alice's arguments: %v; want a conflict naming bob's ticket only", id, err)
		}
	}
	// An id only alice used is unknown to bob.
	mustCreate(t, alice, ticketArgs("alice-only", "alice private"))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	r, err := find(ctx, bob, "alice-only")
	cancel()
	if err != nil || r.Status != "unknown" || r.TicketID != "" {
		t.Errorf("bob's find_request of alice's id = %+v, %v; want unknown with nothing of alice's", r, err)
	}

	waitDelivered(t, alice, deliverTimeout, append(ids, "alice-only")...)
	waitDelivered(t, bob, deliverTimeout, ids...)
	lines := readJSONL(t, s.jsonl)
	if len(lines) != 2*len(ids)+1 {
		t.Errorf("local target holds %d tickets, want %d", len(lines), 2*len(ids)+1)
	}
	for _, id := range ids {
		for i, subject := range []string{"alice", "bob"} {
			key := ticket.ScopedID(subject, id)
			if n := linesFor(lines, key); n != 1 {
				t.Errorf("%d tickets under key %s, want exactly 1", n, key)
			}
			for _, l := range lines {
				if l.Key == key && l.Ticket.TicketID != first[id][i].TicketID {
					t.Errorf("key %s delivered ticket %s, want %s", key, l.Ticket.TicketID, first[id][i].TicketID)
				}
			}
		}
	}
	for _, id := range ids {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		r, err := find(ctx, bob, id)
		cancel()
		if err != nil || r.TicketID != first[id][1].TicketID || r.Status != "delivered" {
			t.Errorf("bob's find_request %s = %+v, %v", id, r, err)
		}
		if got := fmt.Sprint(r); strings.Contains(got, "alice") {
			t.Errorf("bob's find_request %s mentions alice: %s", id, got)
		}
	}
}
