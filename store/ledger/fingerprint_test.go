package ledger_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"ticketrelay/store/ledger"

	"ticketrelay/request"
	"ticketrelay/testkit/fixture"
	"ticketrelay/ticket"
)

var grouping = request.Grouping{Window: time.Hour, Comments: true}

func fingerprinted(id, fp string) ticket.Request {
	r := newRequest(id)
	r.Fingerprint = fp
	return r
}

// The first report files the ticket; a report under another request id
// groups onto it as an occurrence comment; the same request id replays;
// other arguments under it conflict.
func TestGroupFilesOnceAndCountsOccurrences(t *testing.T) {
	e := openEnv(t, dbPath(t))
	ctx := context.Background()
	first, err := e.l.Group(ctx, fingerprinted("r-1", "checkout-500"), grouping)
	if err != nil || first.Grouped || first.Replayed {
		t.Fatalf("first report: %+v, %v; want a ticket of its own", first, err)
	}
	second, err := e.l.Group(ctx, fingerprinted("r-2", "checkout-500"), grouping)
	if err != nil || !second.Grouped || second.TicketID != first.TicketID || second.GroupedOn != "r-1" || second.Occurrences != 2 {
		t.Fatalf("second report: %+v, %v; want grouped onto %s as occurrence 2", second, err, first.TicketID)
	}
	third, _ := e.l.Group(ctx, fingerprinted("r-3", "checkout-500"), grouping)
	again, err := e.l.Group(ctx, fingerprinted("r-2", "checkout-500"), grouping)
	if err != nil || !again.Replayed || !again.Grouped || again.Occurrences != 2 || third.Occurrences != 3 {
		t.Fatalf("r-2 again: %+v, %v (r-3: %+v); want a replay of occurrence 2", again, err, third)
	}
	// The first report again, its group open: it replays the create, and
	// is no occurrence of its own ticket.
	if res, err := e.l.Group(ctx, fingerprinted("r-1", "checkout-500"), grouping); err != nil || !res.Replayed || res.Grouped || res.TicketID != first.TicketID {
		t.Fatalf("r-1 again: %+v, %v; want a replay of the create", res, err)
	}
	other := fingerprinted("r-2", "checkout-500")
	other.Title = "Another title"
	var conflict *request.ConflictError
	if _, err := e.l.Group(ctx, other, grouping); !errors.As(err, &conflict) {
		t.Fatalf("r-2 with other arguments: %v; want a conflict", err)
	}
	db := fixture.Raw(t, e.path)
	if got := rows(t, db); got != [3]int{3, 1, 3} {
		t.Fatalf("requests, tickets, outbox = %v; want 3 rows, 1 ticket, 3 messages", got)
	}
	var body string
	if err := db.QueryRow(`SELECT body FROM requests WHERE request_id = 'r-2' AND kind = 'comment' AND on_request = 'r-1'`).Scan(&body); err != nil ||
		!strings.Contains(body, "occurrence 2") || !strings.Contains(body, "Disk full on db-1") {
		t.Fatalf("r-2's row: %q, %v; want an occurrence comment on r-1", body, err)
	}
	st, err := e.l.Find(ctx, "", "r-3")
	if err != nil || !st.Grouped || st.Ticket != first.TicketID || st.Fingerprint != "checkout-500" || st.Kind != ticket.KindComment {
		t.Fatalf("Find(r-3) = %+v, %v; want grouped onto %s", st, err, first.TicketID)
	}
	// Another subject's, or another target's, same fingerprint is another group.
	mine := fingerprinted("r-4", "checkout-500")
	mine.Subject = "alice"
	if res, err := e.l.Group(ctx, mine, grouping); err != nil || res.Grouped {
		t.Fatalf("alice's report: %+v, %v; want a ticket of its own", res, err)
	}
	elsewhere := fingerprinted("r-5", "checkout-500")
	elsewhere.Target = "other"
	if res, err := e.l.Group(ctx, elsewhere, grouping); err != nil || res.Grouped {
		t.Fatalf("another target's report: %+v, %v; want a ticket of its own", res, err)
	}
}

// Concurrent first reports of one fingerprint file one ticket: the
// writer's transaction decides.
func TestGroupConcurrentFirstReportsFileOneTicket(t *testing.T) {
	e := openEnv(t, dbPath(t))
	ctx := context.Background()
	const n = 16
	results := make([]request.Result, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			results[i], errs[i] = e.l.Group(ctx, fingerprinted(fmt.Sprintf("c-%d", i), "disk-full"), grouping)
		})
	}
	wg.Wait()
	tickets, seen := map[string]bool{}, map[int]bool{}
	for i, r := range results {
		if errs[i] != nil {
			t.Fatalf("c-%d: %v", i, errs[i])
		}
		tickets[r.TicketID] = true
		if r.Grouped {
			seen[r.Occurrences] = true
		}
	}
	if len(tickets) != 1 || len(seen) != n-1 || seen[1] || seen[n+1] {
		t.Fatalf("tickets %v, occurrence numbers %v; want one ticket and occurrences 2..%d", tickets, seen, n)
	}
	if got := rows(t, fixture.Raw(t, e.path)); got != [3]int{n, 1, n} {
		t.Fatalf("requests, tickets, outbox = %v; want %d rows, 1 ticket", got, n)
	}
}

// A ticket closed through ticketrelay, or whose window passed, takes no
// more occurrences: the next report files a new ticket, which opens a
// new group.
func TestGroupEndsWhenClosedOrAfterItsWindow(t *testing.T) {
	e := openEnv(t, dbPath(t))
	ctx := context.Background()
	first, _ := e.l.Group(ctx, fingerprinted("w-1", "oom"), grouping)
	e.clock.Add(grouping.Window - time.Second)
	if res, _ := e.l.Group(ctx, fingerprinted("w-2", "oom"), grouping); !res.Grouped {
		t.Fatalf("a second before the window ends: %+v; want grouped", res)
	}
	e.clock.Add(time.Second)
	renewed, err := e.l.Group(ctx, fingerprinted("w-3", "oom"), grouping)
	if err != nil || renewed.Grouped || renewed.TicketID == first.TicketID {
		t.Fatalf("at the window's end: %+v, %v; want a new ticket", renewed, err)
	}
	if res, _ := e.l.Group(ctx, fingerprinted("w-4", "oom"), grouping); !res.Grouped || res.TicketID != renewed.TicketID || res.Occurrences != 2 {
		t.Fatalf("after the new ticket: %+v; want grouped onto %s as occurrence 2", res, renewed.TicketID)
	}

	set, _ := json.Marshal(map[string]string{"status": "closed"})
	closing := ticket.Request{RequestID: "u-1", Tool: "update_ticket", Target: "local", Action: ticket.Action{On: "w-3", Set: set}}
	if err := closing.NormalizeUpdate(); err != nil {
		t.Fatal(err)
	}
	if _, err := e.l.Create(ctx, closing); err != nil {
		t.Fatal(err)
	}
	after, err := e.l.Group(ctx, fingerprinted("w-5", "oom"), grouping)
	if err != nil || after.Grouped || after.TicketID == renewed.TicketID {
		t.Fatalf("after the ticket was closed: %+v, %v; want a new ticket", after, err)
	}
}

// A target without comments still groups: the occurrence is counted and
// recorded, settled, with nothing to deliver.
func TestGroupWithoutCommentsRecordsOnly(t *testing.T) {
	e := openEnv(t, dbPath(t))
	ctx := context.Background()
	g := request.Grouping{Window: time.Hour}
	e.l.Group(ctx, fingerprinted("n-1", "quota"), g)
	res, err := e.l.Group(ctx, fingerprinted("n-2", "quota"), g)
	if err != nil || !res.Grouped || res.Occurrences != 2 {
		t.Fatalf("second report: %+v, %v; want grouped", res, err)
	}
	if got := rows(t, fixture.Raw(t, e.path)); got != [3]int{2, 1, 1} {
		t.Fatalf("requests, tickets, outbox = %v; want the occurrence without an outbox row", got)
	}
	if st, err := e.l.Find(ctx, "", "n-2"); err != nil || st.Status != request.StatusDelivered || !st.Grouped {
		t.Fatalf("Find(n-2) = %+v, %v; want settled, grouped", st, err)
	}
}

// The occurrence comment quotes the report, but never the mark
// ticketrelay finds its own comments by, and fits a comment's limit.
func TestOccurrenceDefusesTheMarkerAndFits(t *testing.T) {
	r := fingerprinted("o-1", "x")
	r.Body = "see [TicketRelay:abc] " + strings.Repeat("é", ticket.MaxBodyLen)
	c := request.Occurrence(r, "first", 7)
	if err := c.NormalizeComment(); err != nil {
		t.Fatalf("the occurrence comment is refused: %v", err)
	}
	if !strings.HasPrefix(c.Body, `Reported again (occurrence 7, fingerprint "x")`) {
		t.Fatalf("body starts %q", c.Body[:60])
	}
}

// search_tickets shows a ticket's fingerprint and filters by it; the
// occurrences are no tickets.
func TestSearchByFingerprint(t *testing.T) {
	e := openEnv(t, dbPath(t))
	ctx := context.Background()
	e.l.Group(ctx, fingerprinted("s-1", "disk-db1"), grouping)
	e.l.Group(ctx, fingerprinted("s-2", "disk-db1"), grouping)
	e.l.Create(ctx, newRequest("s-3"))
	all := request.Search{Text: "disk full", Scope: request.SearchScope{All: true}, Limit: 10}
	page, err := e.l.SearchTickets(ctx, all)
	if err != nil || len(page.Hits) != 2 {
		t.Fatalf("search without a fingerprint: %+v, %v; want s-1 and s-3", page, err)
	}
	all.Fingerprint = "disk-db1"
	page, err = e.l.SearchTickets(ctx, all)
	if err != nil || len(page.Hits) != 1 || page.Hits[0].Report.RequestID != "s-1" || page.Hits[0].Report.Fingerprint != "disk-db1" {
		t.Fatalf("search by fingerprint: %+v, %v; want s-1 with its fingerprint", page, err)
	}
	// The fingerprint alone finds every ticket filed with it, newest
	// first, whatever its words: an ended group's and the next one's.
	e.clock.Add(grouping.Window)
	e.l.Group(ctx, fingerprinted("s-4", "disk-db1"), grouping)
	e.l.Group(ctx, fingerprinted("s-5", "disk-db2"), grouping)
	page, err = e.l.SearchTickets(ctx, request.Search{Fingerprint: "disk-db1", Scope: request.SearchScope{All: true}, Limit: 10})
	if err != nil || len(page.Hits) != 2 || page.Hits[0].Report.RequestID != "s-4" || page.Hits[1].Report.RequestID != "s-1" {
		t.Fatalf("search by the fingerprint alone: %+v, %v; want s-4 then s-1", page, err)
	}
	if page.Hits[0].Snippet == "" {
		t.Errorf("a hit found by fingerprint alone has no snippet")
	}
	if _, err := e.l.SearchTickets(ctx, request.Search{Scope: request.SearchScope{All: true}, Limit: 10}); err == nil {
		t.Errorf("a search without words or a fingerprint ran")
	}
}

// A search by fingerprint alone reads the fingerprinted tickets' index,
// newest first: without it, it would walk every request.
func TestSearchByFingerprintReadsItsIndex(t *testing.T) {
	e := openEnv(t, dbPath(t))
	q, args := ledger.SearchQueryForTest(request.Search{Fingerprint: "disk-db1", Target: "jira", Status: request.SearchPending, Limit: 10})
	p := explain(t, fixture.Raw(t, e.path), q, args...)
	if !strings.Contains(p, "tickets_fingerprint") || strings.Contains(p, "TEMP B-TREE") {
		t.Errorf("the search by fingerprint alone does not walk tickets_fingerprint in order: %s", p)
	}
}
