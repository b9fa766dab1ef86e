package multihost_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"ticketrelay/testkit/testwait"
)

// A ticket_id works on every host, and a ticket's updates are applied in
// the order they were answered across hosts. The ticket is created on a;
// an update naming it by ticket_id is accepted on a and refused by the
// webhook with 503 while held; a second one, sent to b by the same
// ticket_id after the first was answered, is held back by b's and a's
// forwarders until the first is applied, so the receiver gets them in
// order and the ticket ends with the second's labels. A comment on b by
// the ticket_id lands once.
func TestTicketIDAndUpdatesOrderAcrossHosts(t *testing.T) {
	in := newInstallation(t)
	// A proxy in front of the webhook answers 503 to the first update
	// while blocked, as a receiver that is briefly unavailable.
	var blocked atomic.Bool
	var refused atomic.Int64
	hook, err := url.Parse(in.hook.URL())
	if err != nil {
		t.Fatal(err)
	}
	hook.Path = ""
	forward := httputil.NewSingleHostReverseProxy(hook)
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if blocked.Load() && bytes.Contains(body, []byte(`"first"`)) {
			refused.Add(1)
			http.Error(w, "unavailable", http.StatusServiceUnavailable)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		forward.ServeHTTP(w, r)
	}))
	t.Cleanup(proxy.Close)
	cfg, err := os.ReadFile(in.config)
	if err != nil {
		t.Fatal(err)
	}
	cfg = []byte(strings.Replace(string(cfg), hook.String(), proxy.URL, 1))
	if err := os.WriteFile(in.config, cfg, 0o600); err != nil {
		t.Fatal(err)
	}
	fast := []string{"-retry-base", "100ms", "-retry-max", "400ms"}
	a, b := in.startHost(t, "a", fast...), in.startHost(t, "b", fast...)

	created := a.mustCall(t, "send_hook", args("ref-create", "checkout returns 500"))
	ext := a.waitStatus(t, "ref-create", "delivered", 60*time.Second).ExternalID
	blocked.Store(true)
	a.mustCall(t, "update_ticket", map[string]any{"request_id": "ref-up-1", "ticket": created.TicketID, "labels": []string{"first"}})
	if !testwait.Until(30*time.Second, func() bool { return refused.Load() >= 1 }) {
		t.Fatal("the first update never reached the webhook")
	}
	b.mustCall(t, "update_ticket", map[string]any{"request_id": "ref-up-2", "ticket": created.TicketID, "labels": []string{"second"}})
	b.mustCall(t, "add_comment", map[string]any{"request_id": "ref-comment", "ticket": created.TicketID, "body": "seen on b"})
	b.waitStatus(t, "ref-comment", "delivered", 60*time.Second)
	// The first keeps being refused, retried after at least 100 ms each
	// time: the second, accepted after it was answered, must not be sent
	// meanwhile.
	after := refused.Load()
	if !testwait.Until(30*time.Second, func() bool { return refused.Load() >= after+3 }) {
		t.Fatal("the first update stopped being retried")
	}
	if got := in.hook.Events("ticket.updated", ext); len(got) != 0 {
		t.Fatalf("the webhook received %s while the first update, answered before them, was unsettled", got)
	}
	blocked.Store(false)
	for _, id := range []string{"ref-up-1", "ref-up-2"} {
		a.waitStatus(t, id, "delivered", 60*time.Second)
	}
	var labels [][]string
	for _, ev := range in.hook.Events("ticket.updated", ext) {
		var u struct {
			Set struct{ Labels []string }
		}
		if err := json.Unmarshal(ev, &u); err != nil {
			t.Fatal(err)
		}
		labels = append(labels, u.Set.Labels)
	}
	if len(labels) != 2 || labels[0][0] != "first" || labels[1][0] != "second" {
		t.Fatalf("updates received in the order %v; want [first] then [second]", labels)
	}
	if got := in.hook.Events("ticket.commented", ext); len(got) != 1 {
		t.Fatalf("the comment sent to b by ticket_id reached the webhook %d times", len(got))
	}
}
