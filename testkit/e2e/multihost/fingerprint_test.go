package multihost_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Two hosts race first reports of one fingerprint: the cluster record
// decides, so the webhook receives one ticket, every other report answers
// grouped onto it (numbered 2..N, on either host), both hosts agree on
// each report, a grouped report retried on the other host replays, and
// each occurrence reaches the webhook once, as a comment event; once the
// ticket is closed through the other host, the fingerprint files anew.
func TestFingerprintRaceAcrossHosts(t *testing.T) {
	in := newInstallation(t)
	a, b := in.startHost(t, "a"), in.startHost(t, "b")
	hosts := []*host{a, b}
	type grouped struct {
		TicketID    string `json:"ticket_id"`
		Grouped     bool   `json:"grouped"`
		GroupedOn   string `json:"grouped_on"`
		Occurrences int    `json:"occurrences"`
		Replayed    bool   `json:"replayed"`
	}
	report := func(h *host, id string) (grouped, error) {
		ctx, cancel := context.WithTimeout(t.Context(), 40*time.Second)
		defer cancel()
		res, err := h.cs.CallTool(ctx, &mcp.CallToolParams{Name: "send_hook", Arguments: map[string]any{
			"request_id": id, "title": "Checkout returns 500", "fingerprint": "checkout-500"}})
		if err != nil {
			return grouped{}, err
		}
		text := res.Content[0].(*mcp.TextContent).Text
		var g grouped
		if res.IsError || json.Unmarshal([]byte(text), &g) != nil {
			return g, fmt.Errorf("%s on %s: %s", id, h.name, text)
		}
		return g, nil
	}
	const n = 10
	answers := make([]grouped, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { answers[i], errs[i] = report(hosts[i%2], fmt.Sprintf("fp-%d", i)) })
	}
	wg.Wait()
	numbers, tickets := map[int]bool{}, map[string]bool{}
	first := ""
	for i, g := range answers {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		tickets[g.TicketID] = true
		if g.Grouped {
			numbers[g.Occurrences] = true
		} else {
			first = fmt.Sprintf("fp-%d", i)
		}
	}
	if len(tickets) != 1 || len(numbers) != n-1 || numbers[1] || first == "" {
		t.Fatalf("answers %+v; want one ticket and occurrences 2..%d", answers, n)
	}
	for i := range n {
		id := fmt.Sprintf("fp-%d", i)
		sa := a.waitStatus(t, id, "delivered", 60*time.Second)
		sb := b.waitStatus(t, id, "delivered", 60*time.Second)
		if sa.TicketID != sb.TicketID || sa.TicketID != answers[i].TicketID {
			t.Errorf("%s: a says %+v, b says %+v", id, sa, sb)
		}
	}
	var again grouped
	for i, g := range answers {
		if g.Grouped {
			var err error
			if again, err = report(hosts[(i+1)%2], fmt.Sprintf("fp-%d", i)); err != nil || !again.Replayed || again != (grouped{g.TicketID, true, first, g.Occurrences, true}) {
				t.Fatalf("fp-%d retried on the other host: %+v, %v; want a replay of %+v", i, again, err, g)
			}
			break
		}
	}
	// The webhook takes comments: one ticket, and each occurrence once as
	// a ticket.commented event.
	types, keys := map[string]int{}, map[string]int{}
	for _, d := range in.hook.Deliveries() {
		var e struct {
			Type string `json:"type"`
		}
		if err := json.Unmarshal(d.Body, &e); err != nil {
			t.Fatal(err)
		}
		types[e.Type]++
		keys[d.Key]++
	}
	if len(keys) != n || types["ticket.commented"] != n-1 || len(types) != 2 {
		t.Fatalf("the webhook received %v in %d keys; want one ticket and %d occurrence comments, each once", types, len(keys), n-1)
	}

	// Closed through update_ticket on one host, the group ends for every
	// host: the next report files a new ticket.
	closer := hosts[0]
	if first[len(first)-1]%2 == 0 {
		closer = hosts[1]
	}
	closer.mustCall(t, "update_ticket", map[string]any{"request_id": "fp-close", "ticket": first, "status": "closed"})
	if fresh, err := report(hosts[0], "fp-after-close"); err != nil || fresh.Grouped || fresh.TicketID == answers[0].TicketID {
		t.Fatalf("a report after the ticket was closed: %+v, %v; want a new ticket", fresh, err)
	}
}
