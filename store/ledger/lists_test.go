package ledger_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"ticketrelay/request"
	"ticketrelay/store/ledger"
	"ticketrelay/ticket"
)

// listed is what the test knows of a request it wrote, to list it the
// slow way.
type listed struct {
	id                                 string // scoped
	subject, target, fingerprint, text string
	at                                 time.Time
	state                              string // its list status
}

// want is the list of f the slow way: every request written, filtered,
// newest first (rows is in acceptance order).
func want(rows []listed, f ledger.RequestFilter) []string {
	var out []string
	exact := slices.ContainsFunc(rows, func(r listed) bool {
		return f.Text != "" && (r.id == f.Text || r.id == ticket.ScopedID(f.Subject, f.Text))
	})
	for i := len(rows) - 1; i >= 0; i-- {
		r := rows[i]
		words := strings.Fields(strings.ToLower(strings.Join(request.TextWords(r.text), " ")))
		switch {
		case f.Status != ledger.ListAll && r.state != f.Status,
			f.Target != "" && r.target != f.Target,
			f.Subject != "" && r.subject != f.Subject,
			f.Fingerprint != "" && r.fingerprint != f.Fingerprint,
			exact && r.id != f.Text && r.id != ticket.ScopedID(f.Subject, f.Text),
			!exact && f.Text != "" && slices.ContainsFunc(request.TextWords(strings.ToLower(f.Text)), func(w string) bool { return !slices.Contains(words, w) }),
			!f.From.IsZero() && r.at.Before(f.From),
			!f.To.IsZero() && !r.at.Before(f.To):
			continue
		}
		out = append(out, r.id)
	}
	return out
}

// got pages through list's pages of f, 3 rows each.
func got(t *testing.T, list func(context.Context, ledger.RequestFilter) (ledger.RequestPage, error), f ledger.RequestFilter) []string {
	t.Helper()
	f.Limit = 3
	var out []string
	for pages := 0; ; pages++ {
		if pages > 200 {
			t.Fatalf("%+v: paging does not end", f)
		}
		p, err := list(context.Background(), f)
		if err != nil {
			t.Fatalf("%+v: %v", f, err)
		}
		for _, r := range p.Rows {
			out = append(out, r.RequestID)
		}
		if p.Next == 0 {
			return out
		}
		f.Before = p.Next
	}
}

// sameAsAWalk checks that list lists, for each of filters, what a walk
// of rows finds.
func sameAsAWalk(t *testing.T, list func(context.Context, ledger.RequestFilter) (ledger.RequestPage, error), rows []listed, filters []ledger.RequestFilter) {
	t.Helper()
	checked := 0
	for _, f := range filters {
		w, g := want(rows, f), got(t, list, f)
		if fmt.Sprint(w) != fmt.Sprint(g) {
			t.Errorf("%+v: listed %v, want %v", f, g, w)
		}
		checked += len(w)
	}
	if checked < 500 {
		t.Fatalf("the filters matched %d rows in all: the test lists too little to tell", checked)
	}
}

// listFilters are the filter combinations the console offers, over the
// values the tests write: each alone and with a status, and some
// together; rare and absent matches included.
func listFilters(base time.Time) []ledger.RequestFilter {
	statuses := []string{ledger.ListAll, ledger.ListWaiting, ledger.ListInFlight, string(request.StatusRetrying),
		string(request.StatusFailed), string(request.StatusUncertain), string(request.StatusDelivered)}
	var each []ledger.RequestFilter
	for _, v := range []string{"", "local", "hook", "nowhere"} {
		each = append(each, ledger.RequestFilter{Target: v})
	}
	for _, v := range []string{"ops", "rare", "nobody"} {
		each = append(each, ledger.RequestFilter{Subject: v})
	}
	for _, v := range []string{"fp-a", "fp-b", "fp-none"} {
		each = append(each, ledger.RequestFilter{Fingerprint: v})
	}
	for _, v := range []string{"printer", "PRINTER fire", "zebra", "disk", "ops:req-017", "req-018"} {
		each = append(each, ledger.RequestFilter{Text: v})
	}
	for _, tr := range [][2]int{{0, 10}, {5, 6}, {-100, -50}, {30, 0}, {0, 0}, {12, 40}, {2, 3}} {
		f := ledger.RequestFilter{From: base.Add(time.Duration(tr[0]) * time.Minute), To: base.Add(time.Duration(tr[1]) * time.Minute)}
		if tr[1] == 0 {
			f.To = time.Time{}
		}
		if tr[0] == 0 && tr[1] != 0 {
			f.From = time.Time{}
		}
		each = append(each, f)
	}
	var out []ledger.RequestFilter
	for _, s := range statuses {
		for _, f := range each {
			f.Status = s
			out = append(out, f)
		}
		out = append(out,
			ledger.RequestFilter{Status: s, Subject: "rare", Target: "hook"},
			ledger.RequestFilter{Status: s, Subject: "ops", Text: "req-018"},
			ledger.RequestFilter{Status: s, Subject: "ops", Text: "printer", From: base.Add(3 * time.Minute)},
			ledger.RequestFilter{Status: s, Text: "disk", Target: "local", To: base.Add(20 * time.Minute)},
			ledger.RequestFilter{Status: s, Fingerprint: "fp-a", Subject: "ops", From: base.Add(time.Minute)})
	}
	return out
}

// Every filter combination the console offers lists what a walk of the
// whole ledger finds, newest first, page after page: a waiting list
// among delivered requests, a rare subject, a fingerprint, words of the
// text or a request id, a time range, with or without a status, and
// requests accepted out of order (an earlier claim time) found by their
// time.
func TestListFiltersFindWhatAWalkFinds(t *testing.T) {
	ctx := context.Background()
	e := openEnv(t, dbPath(t))
	base := e.clock.Now()
	states := []string{"", "in_flight", "retrying-lookup", string(request.StatusRetrying), string(request.StatusFailed),
		string(request.StatusUncertain), string(request.StatusDelivered), string(request.StatusDelivered), string(request.StatusDelivered)}
	var rows []listed
	for i := range 60 {
		req := newRequest(fmt.Sprintf("req-%03d", i))
		req.Subject = "ops"
		if i%13 == 5 {
			req.Subject = "rare"
		}
		if i%4 == 1 {
			req.Target = "hook"
		}
		if i%7 == 2 {
			req.Title = "Printer on fire in room " + fmt.Sprint(i)
		}
		if i%9 == 4 {
			req.Fingerprint = "fp-a"
		} else if i%11 == 3 {
			req.Fingerprint = "fp-b"
		}
		at := base.Add(time.Duration(i) * time.Minute)
		if i%10 == 7 {
			at = base.Add(time.Duration(i-25) * time.Minute) // claimed earlier, committed now
		}
		if _, err := e.l.CreateAt(ctx, req, req.Hash(), at); err != nil {
			t.Fatal(err)
		}
		r := listed{id: req.Scoped(), subject: req.Subject, target: req.Target, fingerprint: req.Fingerprint, at: at,
			text: req.Title + " " + req.Body + " " + strings.Join(req.Labels, " "), state: ledger.ListWaiting}
		d := request.Delivery{RequestID: req.Scoped(), Target: req.Target, Attempts: 1}
		switch st := states[i%len(states)]; st {
		case "":
		case "in_flight":
			d.State, r.state = request.DeliveryAttempting, ledger.ListInFlight
		case "retrying-lookup":
			d.State, d.NextAttemptAt, r.state = request.DeliveryAttempting, at.Add(time.Hour), string(request.StatusRetrying)
		default:
			d.State, r.state = st, st
		}
		if d.State != "" {
			if err := e.l.RecordDelivery(ctx, d); err != nil {
				t.Fatal(err)
			}
		}
		rows = append(rows, r)
	}
	sameAsAWalk(t, e.l.ListRequests, rows, listFilters(base))
	if _, err := e.l.ListRequests(ctx, ledger.RequestFilter{Text: "!!", Limit: 5}); err == nil || !strings.Contains(err.Error(), "text") {
		t.Errorf("a text of no words and no request id: %v, want an error naming the text", err)
	}
}

// The cluster copy's list finds what a walk of the copy finds, for every
// filter it offers, records first seen out of acceptance order included.
func TestClusterListFiltersFindWhatAWalkFinds(t *testing.T) {
	ctx := context.Background()
	e := openEnv(t, dbPath(t))
	base := time.Unix(1_700_000_000, 0).UTC()
	states := []string{"", request.DeliveryAttempting, string(request.StatusRetrying), string(request.StatusFailed),
		string(request.StatusUncertain), string(request.StatusDelivered), string(request.StatusDelivered)}
	var rows []listed
	var recs []request.CopiedRecord
	for i := range 60 {
		rec := clusterRec(i, "host-a", states[i%len(states)], 1, uint64(i+1))
		rec.RequestID = fmt.Sprintf("ops:req-%03d", i)
		rec.Target = []string{"local", "hook"}[min(i%4, 1)]
		if i%13 == 5 {
			rec.Subject, rec.RequestID = "rare", fmt.Sprintf("rare:req-%03d", i)
		}
		if i%7 == 2 {
			rec.Title = "Printer on fire in room " + fmt.Sprint(i)
		}
		switch i % 9 {
		case 4:
			rec.Fingerprint = "fp-a"
		case 6:
			rec.Fingerprint = "fp-b"
		}
		rec.AcceptedAt = base.Add(time.Duration(i) * time.Minute)
		if i%10 == 7 {
			rec.AcceptedAt = base.Add(time.Duration(i-25) * time.Minute)
		}
		if i%17 == 3 {
			rec.Phase = "claimed" // no host accepted it: in no waiting list
		}
		r := listed{id: rec.RequestID, subject: rec.Subject, target: rec.Target, fingerprint: rec.Fingerprint, at: rec.AcceptedAt, text: rec.Title, state: ledger.ListWaiting}
		switch {
		case rec.Delivery == nil && rec.Phase != "accepted":
			r.state = ledger.ListClaimed
		case rec.Delivery == nil:
		case rec.Delivery.State == request.DeliveryAttempting:
			r.state = ledger.ListInFlight
		default:
			r.state = rec.Delivery.State
		}
		recs, rows = append(recs, rec), append(rows, r)
	}
	if err := e.l.FoldRecords(ctx, recs, 60); err != nil {
		t.Fatal(err)
	}
	sameAsAWalk(t, e.l.ListCluster, rows, listFilters(base))
}
