package app_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"ticketrelay/delivery/downstream/redmine/redminetest"
	"ticketrelay/internal/app/dispatcher"
	"ticketrelay/internal/app/front"
	"ticketrelay/testkit/testwait"
)

// TestFingerprintGroupsRepeatedReports: create_ticket's fingerprint
// through the real front over HTTP, the ledger, NATS and the forwarder, to
// a Redmine fake.
//
//   - N concurrent first reports of one fingerprint file one ticket; the
//     N-1 others answer grouped onto it, numbered 2..N, and reach Redmine
//     as one note each;
//   - a grouped report repeated is a replay: nothing more is written;
//   - once the ticket is closed through update_ticket, the fingerprint
//     files a new ticket;
//   - find_request says which ticket a grouped report joined, and
//     search_tickets shows and filters the fingerprint;
//   - a fingerprint that is not one line of text is refused, naming it.
func TestFingerprintGroupsRepeatedReports(t *testing.T) {
	rm := redminetest.New(t, "rm-key", "ops", 0)
	listen := freePort(t)
	const token = "writer-0123456789abcdef0123456789"
	cfg := writeFile(t, "ticketrelay.yaml", `
targets:
  - {name: rm, kind: redmine, endpoint: '`+rm.URL()+`', options: {api_key_env: RM_KEY, project: ops}, group_window: 1h}
tools:
  - {name: file_issue, target: rm}
`)
	dir := t.TempDir()
	env := newEnv("TICKETRELAY_AUTH_TOKENS", "writer:"+token, "RM_KEY", "rm-key")
	start(t, front.Run, env, "-listen", listen, "-metrics-listen", "", "-config", cfg, "-create-db", "-db", filepath.Join(dir, "tickets.db"))

	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "fingerprint-test", Version: "0"}, nil).
		Connect(ctx, &mcp.StreamableClientTransport{Endpoint: "http://" + listen + "/mcp", HTTPClient: &http.Client{Transport: bearerRT{token}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	raw := func(tool string, args map[string]any) (string, bool) {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
		if err != nil {
			t.Errorf("%s: %v", tool, err)
			return "", true
		}
		return res.Content[0].(*mcp.TextContent).Text, res.IsError
	}
	call := func(tool string, args map[string]any) map[string]any {
		text, isErr := raw(tool, args)
		var out map[string]any
		if isErr || json.Unmarshal([]byte(text), &out) != nil {
			t.Errorf("%s %v: %s", tool, args, text)
		}
		return out
	}
	report := func(id string) map[string]any {
		return map[string]any{"request_id": id, "title": "Checkout returns 500", "body": "POST /checkout: 500", "fingerprint": "checkout-500"}
	}

	const n = 8
	answers := make([]map[string]any, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { answers[i] = call("file_issue", report(fmt.Sprintf("r-%d", i))) })
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	var first map[string]any
	occurrences := map[float64]bool{}
	for _, a := range answers {
		if a["grouped"] == true {
			occurrences[a["occurrences"].(float64)] = true
		} else if first == nil {
			first = a
		} else {
			t.Fatalf("two reports filed a ticket: %v and %v", first, a)
		}
	}
	if first == nil || len(occurrences) != n-1 || occurrences[1] {
		t.Fatalf("answers %v; want one ticket and occurrences 2..%d", answers, n)
	}
	for _, a := range answers {
		if a["ticket_id"] != first["ticket_id"] || (a["grouped"] == true && a["grouped_on"] != first["request_id"]) {
			t.Fatalf("answer %v; want every report on %v (%v)", a, first["ticket_id"], first["request_id"])
		}
	}

	disp := start(t, dispatcher.Run, env, dispatcherArgs(dir, "-config", cfg, "-retry-base", "100ms", "-retry-max", "500ms")...)
	status := func(id string) string {
		s, _ := call("find_request", map[string]any{"request_id": id})["status"].(string)
		return s
	}
	for i := range n {
		id := fmt.Sprintf("r-%d", i)
		if !testwait.Until(60*time.Second, func() bool { return status(id) == "delivered" }) {
			t.Fatalf("%s: %v\ndispatcher:\n%s", id, call("find_request", map[string]any{"request_id": id}), disp.stderr)
		}
	}
	issues := rm.Issues()
	if len(issues) != 1 {
		t.Fatalf("Redmine has %d issues, want 1", len(issues))
	}
	notes := rm.NotesOf(int64(issues[0].ID))
	if len(notes) != n-1 {
		t.Fatalf("the issue has %d notes, want %d: %q", len(notes), n-1, notes)
	}
	for k := 2; k <= n; k++ {
		if c := strings.Count(strings.Join(notes, "\n"), fmt.Sprintf("(occurrence %d,", k)); c != 1 {
			t.Errorf("occurrence %d is in %d notes, want 1", k, c)
		}
	}

	// A grouped report repeated replays its answer.
	var grouped map[string]any
	for _, a := range answers {
		if a["grouped"] == true {
			grouped = a
			break
		}
	}
	again := call("file_issue", report(grouped["request_id"].(string)))
	if again["replayed"] != true || again["grouped"] != true || again["occurrences"] != grouped["occurrences"] || again["external_url"] == "" {
		t.Fatalf("a grouped report again: %v; want a replay of %v with the ticket's link", again, grouped)
	}
	found := call("find_request", map[string]any{"request_id": grouped["request_id"]})
	if found["grouped"] != true || found["ticket"] != first["ticket_id"] || found["fingerprint"] != "checkout-500" {
		t.Errorf("find_request of a grouped report: %v; want grouped onto %v", found, first["ticket_id"])
	}
	if c, _ := call("find_request", map[string]any{"request_id": first["request_id"]})["comments"].([]any); len(c) != n-1 {
		t.Errorf("the ticket lists %d comments, want %d", len(c), n-1)
	}

	// Closed through ticketrelay: the next report files a new ticket.
	call("update_ticket", map[string]any{"request_id": "u-1", "ticket": first["ticket_id"], "status": "closed"})
	fresh := call("file_issue", report("r-after-close"))
	if fresh["grouped"] == true || fresh["ticket_id"] == first["ticket_id"] {
		t.Fatalf("a report after the ticket was closed: %v; want a new ticket", fresh)
	}
	testwait.For(t, 60*time.Second, "the new ticket delivered", func() bool { return status("r-after-close") == "delivered" })
	if got := len(rm.Issues()); got != 2 {
		t.Fatalf("Redmine has %d issues, want 2", got)
	}

	// With words and the fingerprint, and with the fingerprint alone.
	for _, args := range []map[string]any{{"query": "checkout", "fingerprint": "checkout-500"}, {"fingerprint": "checkout-500"}} {
		text, _ := raw("search_tickets", args)
		var page struct {
			Results []struct {
				RequestID   string `json:"request_id"`
				Fingerprint string `json:"fingerprint"`
			} `json:"results"`
		}
		if err := json.Unmarshal([]byte(text), &page); err != nil || len(page.Results) != 2 || page.Results[0].Fingerprint != "checkout-500" {
			t.Errorf("search_tickets %v: %s; want the two tickets with the fingerprint", args, text)
		}
	}

	for _, bad := range []string{"two\nlines", strings.Repeat("x", 256)} {
		args := report("r-bad")
		args["fingerprint"] = bad
		if text, isErr := raw("file_issue", args); !isErr || !strings.Contains(text, "fingerprint") {
			t.Errorf("fingerprint %.20q: %v %s; want refused, naming it", bad, isErr, text)
		}
	}
	if st := status("r-bad"); st != "unknown" {
		t.Errorf("a refused report was stored: %s", st)
	}
}
