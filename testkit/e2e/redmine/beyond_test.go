package redmine_test

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"ticketrelay/delivery/downstream"
	"ticketrelay/delivery/downstream/downstreamtest"
	"ticketrelay/delivery/downstream/redmine"
)

// journal is Redmine's rendering of one journal of an issue.
type journal struct {
	ID      int64  `json:"id"`
	Notes   string `json:"notes"`
	Details []struct {
		Name     string `json:"name"`
		NewValue string `json:"new_value"`
	} `json:"details"`
}

// issueState reads issue id with its journals through Redmine's own API.
func issueState(t *testing.T, id string) (status int, closed bool, priority int, journals []journal) {
	t.Helper()
	var ans struct {
		Issue struct {
			Status struct {
				ID       int  `json:"id"`
				IsClosed bool `json:"is_closed"`
			} `json:"status"`
			Priority struct{ ID int } `json:"priority"`
			Journals []journal        `json:"journals"`
		} `json:"issue"`
	}
	if st := api(t, http.MethodGet, "/issues/"+id+".json?include=journals", nil, &ans); st != http.StatusOK {
		t.Fatalf("GET /issues/%s.json: HTTP %d", id, st)
	}
	is := ans.Issue
	return is.Status.ID, is.Status.IsClosed, is.Priority.ID, is.Journals
}

// Comments (journal notes) and updates against the real server: what the
// fake (redminetest) claims about them holds here.
func TestAdapterBeyondCreate(t *testing.T) {
	needRedmine(t)
	ctx := context.Background()
	p := project(t, nil)
	newTarget := func(t *testing.T, base string) *redmine.Target {
		tg, err := redmine.New(redmine.Config{Name: "rm", BaseURL: base, APIKey: downstream.NewSecret(server.key), Project: p,
			CustomFieldID: server.fieldID, PriorityIDs: map[string]int{"low": 1, "normal": 2, "high": 3, "urgent": 4}})
		if err != nil {
			t.Fatal(err)
		}
		return tg
	}
	tg := newTarget(t, server.url)
	filed, err := tg.Deliver(ctx, downstreamtest.NewDelivery("beyond"))
	if err != nil {
		t.Fatal(err)
	}

	t.Run("comment", func(t *testing.T) {
		d := downstreamtest.NewComment("c-real", filed.URL) // the create's URL is a reference
		r, err := tg.AddComment(ctx, d)
		if err != nil {
			t.Fatal(err)
		}
		_, _, _, js := issueState(t, filed.ExternalID)
		var mine []journal
		for _, j := range js {
			if strings.Contains(j.Notes, downstream.Marker(d.Key)) {
				mine = append(mine, j)
			}
		}
		if len(mine) != 1 || !strings.HasPrefix(mine[0].Notes, strings.TrimSpace(d.Body)) || r.ExternalID != strconv.FormatInt(mine[0].ID, 10) {
			t.Fatalf("journals %+v, receipt %+v; want one note with the body and the marker, named by the receipt", js, r)
		}
		found, ok, err := tg.FindComment(ctx, d)
		if err != nil || !ok || found != r {
			t.Fatalf("FindComment = %+v, %v, %v; want %+v", found, ok, err, r)
		}
		if r, ok, err := tg.FindComment(ctx, downstreamtest.NewComment("c-never", filed.ExternalID)); err != nil || ok {
			t.Fatalf("FindComment of a key never sent = %+v, %v, %v; want not found", r, ok, err)
		}
	})

	t.Run("lost answer", func(t *testing.T) {
		proxy := newDropProxyOf(t, 1, func(r *http.Request) bool { return r.Method == http.MethodPut })
		d := downstreamtest.NewComment("c-lost", filed.ExternalID)
		_, err := newTarget(t, proxy.url).AddComment(ctx, d)
		if e := downstream.Classify(err); err == nil || e.Class != downstream.Transient || !e.MayHaveActed {
			t.Fatalf("AddComment with its answer lost: %v; want transient, may have acted", err)
		}
		// What the forwarder does next: look the marker up, and resend only
		// when it is proven absent.
		if _, ok, err := tg.FindComment(ctx, d); err != nil || !ok {
			t.Fatalf("FindComment after the lost answer = %v, %v; want found", ok, err)
		}
		_, _, _, js := issueState(t, filed.ExternalID)
		n := 0
		for _, j := range js {
			if strings.Contains(j.Notes, downstream.Marker(d.Key)) {
				n++
			}
		}
		if n != 1 {
			t.Fatalf("%d notes carry the key's marker, want 1", n)
		}
	})

	t.Run("status and priority", func(t *testing.T) {
		set := downstream.Update{Status: downstream.StatusClosed, Priority: "urgent", Assignee: new("1")}
		_, _, _, before := issueState(t, filed.ExternalID)
		for i := range 2 {
			if _, err := tg.Update(ctx, downstream.UpdateDelivery{Key: "u-real", Attempt: i + 1, Ticket: "#" + filed.ExternalID, Set: set}); err != nil {
				t.Fatalf("update %d: %v", i+1, err)
			}
		}
		status, closed, prio, js := issueState(t, filed.ExternalID)
		if !closed || status != 5 || prio != 4 {
			t.Fatalf("after closing at urgent: status %d (closed %v), priority %d; want Closed (5), Urgent (4)", status, closed, prio)
		}
		if n := len(js) - len(before); n != 1 {
			t.Fatalf("the same update twice made %d journals, want 1", n)
		}
		if _, err := tg.Update(ctx, downstream.UpdateDelivery{Key: "u-reopen", Attempt: 1, Ticket: filed.ExternalID,
			Set: downstream.Update{Status: downstream.StatusOpen, Assignee: new("")}}); err != nil {
			t.Fatal(err)
		}
		if status, closed, _, _ := issueState(t, filed.ExternalID); closed || status != 1 {
			t.Fatalf("after reopening: status %d (closed %v); want New (1)", status, closed)
		}
	})

	t.Run("errors", func(t *testing.T) {
		_, err := tg.AddComment(ctx, downstreamtest.NewComment("c-gone", "999999"))
		if e := downstream.Classify(err); err == nil || e.Class != downstream.Permanent || e.StatusCode != 404 {
			t.Errorf("a comment on an issue that does not exist: %v; want permanent 404", err)
		}
		_, err = tg.Update(ctx, downstream.UpdateDelivery{Key: "u-bad", Attempt: 1, Ticket: filed.ExternalID, Set: downstream.Update{Assignee: new("424242")}})
		if e := downstream.Classify(err); err == nil || e.Class != downstream.Permanent || e.StatusCode != 422 || !strings.Contains(err.Error(), "Assignee is invalid") {
			t.Errorf("an unknown assignee: %v; want permanent 422 Assignee is invalid", err)
		}
	})
}
