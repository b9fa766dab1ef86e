package multihost_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"ticketrelay/internal/failpoint"
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
	types, keys := hookEvents(t, in)
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

// A report whose mcp-front is killed between its claim and its group's
// decision (failpoint front.after-claim), on a host whose dispatcher is
// dead too, while a report on the other host opens the group: once the
// host is adopted, the cut report is an occurrence of the one ticket.
// The webhook receives one ticket and one comment. Before, adoption
// committed the cut claim as a plain create: a second ticket.
func TestCutReportAdoptedIntoTheGroup(t *testing.T) {
	in := newInstallation(t)
	a := in.startHost(t, "a", "-host-dead-after", "3s")
	b := in.startHostWith(t, "b", []string{failpoint.EnvVar + "=" + failpoint.FrontAfterClaim + "=kill"}, "-host-dead-after", "3s")
	a.waitStatus(t, "warm-up", "unknown", 10*time.Second)
	b.disp.Kill9()
	<-b.disp.Done()
	b.front.ExpectExit()
	report := map[string]any{"title": "Checkout returns 500", "fingerprint": "checkout-500"}
	with := func(id string) map[string]any {
		m := map[string]any{"request_id": id}
		for k, v := range report {
			m[k] = v
		}
		return m
	}
	if _, err := b.call(t, "send_hook", with("fp-cut")); err == nil {
		t.Fatal("the call on b answered: its front should have been killed after the claim")
	}
	<-b.front.Done()
	first := a.mustCall(t, "send_hook", with("fp-first"))

	// a adopts b: the cut report is committed as what the group decides.
	st := a.waitStatus(t, "fp-cut", "delivered", 60*time.Second)
	if st.TicketID != first.TicketID {
		t.Fatalf("the cut report, adopted: %+v; want an occurrence of %s", st, first.TicketID)
	}
	a.waitStatus(t, "fp-first", "delivered", 60*time.Second)
	types, keys := hookEvents(t, in)
	if types["ticket.commented"] != 1 || len(types) != 2 || len(keys) != 2 {
		t.Fatalf("the webhook received %v in %d keys; want one ticket and one occurrence comment", types, len(keys))
	}
	for k, n := range keys {
		if n != 1 {
			t.Errorf("the webhook received %s %d times", k, n)
		}
	}
}

// hookEvents counts what the webhook received: by event type, and by key.
func hookEvents(t *testing.T, in *installation) (types, keys map[string]int) {
	t.Helper()
	types, keys = map[string]int{}, map[string]int{}
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
	return types, keys
}
