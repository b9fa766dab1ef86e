package redmine_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"ticketrelay/delivery/downstream"
	"ticketrelay/delivery/downstream/downstreamtest"
	"ticketrelay/delivery/downstream/redmine"
	"ticketrelay/testkit/testwait"
)

// settleTimeout bounds a request's way to a final state; a redelivery after
// a dispatcher crash waits out the consumer's AckWait (10s).
const settleTimeout = 45 * time.Second

// expectOne checks that project holds exactly one issue, carrying key, and
// that the delivered request names it; it returns the issue.
func expectOne(t *testing.T, project, key string, st status) issue {
	t.Helper()
	list := issues(t, project)
	t.Logf("Redmine holds %d issue(s) in project %s", len(list), project)
	if len(list) != 1 {
		t.Fatalf("Redmine holds %d issues in project %s, want exactly 1: %+v", len(list), project, list)
	}
	is := list[0]
	if got := is.field(server.fieldID); got != key {
		t.Errorf("issue #%d holds %q in custom field %d, want the key %q", is.ID, got, server.fieldID, key)
	}
	if st.Status != "delivered" || st.ExternalID != strconv.FormatInt(is.ID, 10) || !strings.HasSuffix(st.ExternalURL, fmt.Sprintf("/issues/%d", is.ID)) {
		t.Errorf("find_request %+v; want delivered as issue #%d", st, is.ID)
	}
	if st.LastError != "" {
		t.Errorf("delivered with last_error %q", st.LastError)
	}
	return is
}

func TestCreate(t *testing.T) {
	needRedmine(t)
	p := project(t, nil)
	s := startStack(t, server.url, p)

	// No dedupe key: the tool is not announced as idempotent.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tools, err := s.cs.ListTools(ctx, &mcp.ListToolsParams{})
	if err != nil {
		t.Fatal(err)
	}
	var tool *mcp.Tool
	for _, tl := range tools.Tools {
		if tl.Name == toolName {
			tool = tl
		}
	}
	if tool == nil || tool.Annotations == nil || tool.Annotations.IdempotentHint {
		t.Fatalf("tool %s: %+v; want annotations without idempotentHint", toolName, tool)
	}
	if !strings.Contains(tool.Description, "find_request") {
		t.Errorf("description %q does not tell the agent to call find_request before retrying", tool.Description)
	}

	id := "req-create"
	c := s.create(t, id, "Disk full on db-7")
	st := s.settle(t, id, settleTimeout)
	is := expectOne(t, p, downstream.Key(namespace, id), st)
	// find_request names the issue by Redmine's own URL, which answers.
	if want := fmt.Sprintf("%s/issues/%d", server.url, is.ID); st.ExternalURL != want {
		t.Fatalf("external_url %q, want %q", st.ExternalURL, want)
	}
	var got struct{ Issue issue }
	if code := api(t, http.MethodGet, strings.TrimPrefix(st.ExternalURL, server.url)+".json", nil, &got); code != http.StatusOK || got.Issue.ID != is.ID {
		t.Fatalf("GET %s.json: HTTP %d, %+v", st.ExternalURL, code, got.Issue)
	}
	if is.Subject != "Disk full on db-7" || is.Priority.ID != 3 || !strings.Contains(is.Description, c.TicketID) ||
		!strings.Contains(is.Description, "Writes fail since 03:12.") {
		t.Errorf("issue %+v; want the title, priority 3 (high), the body and ticket %s", is, c.TicketID)
	}
	if st.Attempts != 1 {
		t.Errorf("delivered after %d attempts, want 1", st.Attempts)
	}
}

// dropProxy forwards to Redmine; the first drop creates (or other requests,
// see newDropProxyOf) it forwards in full (Redmine processes them), then it
// hangs up without answering.
type dropProxy struct {
	drop    atomic.Int32
	creates atomic.Int32 // POST /issues.json that reached Redmine
	lookups atomic.Int32 // GET /issues.json
	url     string
}

// wantOneCreateThenLookup checks that exactly one create reached Redmine,
// and a lookup after it (the attempt whose outcome was unknown).
func (p *dropProxy) wantOneCreateThenLookup(t *testing.T) {
	t.Helper()
	t.Logf("create calls that reached Redmine: %d, lookups: %d", p.creates.Load(), p.lookups.Load())
	if p.creates.Load() != 1 || p.lookups.Load() < 1 {
		t.Errorf("%d creates and %d lookups reached Redmine; want 1 create, then a lookup", p.creates.Load(), p.lookups.Load())
	}
}

func newDropProxy(t *testing.T, drop int32) *dropProxy {
	return newDropProxyOf(t, drop, func(r *http.Request) bool { return r.Method == http.MethodPost && r.URL.Path == "/issues.json" })
}

// newDropProxyOf is a proxy to Redmine that loses the answers of the first
// drop requests for which lose is true, after Redmine processed them.
func newDropProxyOf(t *testing.T, drop int32, lose func(*http.Request) bool) *dropProxy {
	target, err := url.Parse(server.url)
	if err != nil {
		t.Fatal(err)
	}
	p := &dropProxy{}
	p.drop.Store(drop)
	rp := httputil.NewSingleHostReverseProxy(target)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == http.MethodPost && r.URL.Path == "/issues.json":
			p.creates.Add(1)
		case r.Method == http.MethodGet && r.URL.Path == "/issues.json":
			p.lookups.Add(1)
		}
		if !lose(r) || p.drop.Add(-1) < 0 {
			rp.ServeHTTP(w, r)
			return
		}
		// Send the request on, read Redmine's whole answer, and lose it.
		out := r.Clone(r.Context())
		out.URL.Scheme, out.URL.Host, out.Host, out.RequestURI = target.Scheme, target.Host, target.Host, ""
		resp, err := http.DefaultTransport.RoundTrip(out)
		if err != nil {
			t.Errorf("proxy: %v", err)
		} else {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode/100 != 2 {
				t.Errorf("proxy: Redmine answered the dropped %s %s with HTTP %d", r.Method, r.URL.Path, resp.StatusCode)
			}
		}
		conn, _, err := w.(http.Hijacker).Hijack()
		if err != nil {
			t.Errorf("proxy: hijack: %v", err)
			return
		}
		conn.Close()
	}))
	t.Cleanup(srv.Close)
	p.url = srv.URL
	return p
}

// The answer to the create is lost after Redmine created the issue. The
// attempt stays "attempting", the message comes back, the lookup finds the
// issue, and nothing is created again.
func TestLostResponse(t *testing.T) {
	needRedmine(t)
	p := project(t, nil)
	proxy := newDropProxy(t, 1)
	s := startStack(t, proxy.url, p)
	id := "req-lost"
	s.create(t, id, "Lost answer")
	st := s.settle(t, id, settleTimeout)
	expectOne(t, p, downstream.Key(namespace, id), st)
	proxy.wantOneCreateThenLookup(t)
}

// The dispatcher is killed (SIGKILL) after Redmine answered the create and
// before the outcome was recorded or the message acked. The restarted
// dispatcher gets the message again, finds the issue, and creates nothing.
func TestDispatcherKilledBetweenCallAndAck(t *testing.T) {
	needRedmine(t)
	p := project(t, nil)
	proxy := newDropProxy(t, 0) // counts the calls, drops nothing
	s := startStack(t, proxy.url, p, "TICKETRELAY_FAILPOINTS=forwarder.after-deliver=kill@1")
	first := s.dispatcher
	id := "req-killed"
	s.create(t, id, "Killed before the ack")
	testwait.For(t, 30*time.Second, "the dispatcher to kill itself after the call", first.Exited)
	if !first.KilledBySIGKILL() {
		t.Fatalf("the dispatcher exited, not by SIGKILL: %v", first.Err())
	}
	first.ExpectExit()
	if n := len(issues(t, p)); n != 1 {
		t.Fatalf("after the call and before the restart Redmine holds %d issues, want 1", n)
	}
	if st := s.find(t, id); st.Status == "delivered" {
		t.Fatalf("delivered before the restart: %+v", st)
	}
	s.startDispatcher(t)
	st := s.settle(t, id, settleTimeout)
	expectOne(t, p, downstream.Key(namespace, id), st)
	proxy.wantOneCreateThenLookup(t)
}

// Redmine 5 replaces a tracker_id the project does not enable with the
// project's first tracker, silently; the invalid tracker it does reject is
// none at all: a project without trackers answers 422. That ends the
// request "failed" with Redmine's message, after one attempt.
func TestInvalidTracker(t *testing.T) {
	needRedmine(t)
	p := project(t, []int{})
	s := startStack(t, server.url, p)
	id := "req-invalid"
	s.create(t, id, "No tracker")
	st := s.settle(t, id, settleTimeout)
	if st.Status != "failed" || !strings.Contains(st.LastError, "Tracker cannot be blank") || !strings.Contains(st.LastError, "HTTP 422") {
		t.Fatalf("find_request %+v; want failed with Redmine's 422 message", st)
	}
	if st.Attempts != 1 {
		t.Errorf("failed after %d attempts; a 422 must not be retried", st.Attempts)
	}
	if n := len(issues(t, p)); n != 0 {
		t.Fatalf("Redmine holds %d issues, want 0", n)
	}
}

// The adapter against the real server, call by call: what the fake
// (redminetest) claims about Redmine holds here.
func TestAdapterContract(t *testing.T) {
	needRedmine(t)
	newTarget := func(t *testing.T, mod func(*redmine.Config)) *redmine.Target {
		cfg := redmine.Config{Name: "rm", BaseURL: server.url, APIKey: downstream.NewSecret(server.key),
			Project: project(t, nil), CustomFieldID: server.fieldID}
		if mod != nil {
			mod(&cfg)
		}
		tg, err := redmine.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return tg
	}
	ctx := context.Background()

	t.Run("exact key", func(t *testing.T) {
		for _, fid := range []int{server.fieldID, 0} {
			var p string
			tg := newTarget(t, func(c *redmine.Config) { c.CustomFieldID = fid; p = c.Project })
			odd := downstreamtest.NewDelivery("odd")
			odd.Key = "!~a|b*%_&x=y" // operators of Redmine's short filters
			prefix := downstreamtest.NewDelivery("prefix")
			prefix.Key = "!~a"
			r, err := tg.Deliver(ctx, odd)
			if err != nil {
				t.Fatal(err)
			}
			if _, found, err := tg.Find(ctx, prefix); err != nil || found {
				t.Fatalf("field %d: Find(%q) = %v, %v; want not found", fid, prefix.Key, found, err)
			}
			got, found, err := tg.Find(ctx, odd)
			if err != nil || !found || got != r {
				t.Fatalf("field %d: Find(%q) = %+v, %v, %v; want %+v", fid, odd.Key, got, found, err, r)
			}
			if n := len(issues(t, p)); n != 1 {
				t.Fatalf("field %d: %d issues, want 1", fid, n)
			}
		}
	})

	t.Run("dropped custom field", func(t *testing.T) {
		var p string
		good := newTarget(t, func(c *redmine.Config) { p = c.Project })
		other := downstreamtest.NewDelivery("other")
		if _, err := good.Deliver(ctx, other); err != nil {
			t.Fatal(err)
		}
		wrong, err := redmine.New(redmine.Config{Name: "rm", BaseURL: server.url, APIKey: downstream.NewSecret(server.key),
			Project: p, CustomFieldID: 999})
		if err != nil {
			t.Fatal(err)
		}
		_, err = wrong.Deliver(ctx, downstreamtest.NewDelivery("dropped"))
		if e := downstream.Classify(err); err == nil || e.Class != downstream.Permanent || !strings.Contains(err.Error(), "custom field 999") {
			t.Fatalf("Deliver with an unknown custom field: %v; want a permanent error naming the field", err)
		}
		// Redmine ignores the unknown filter and lists every issue; the
		// adapter must neither take one of them for the key nor conclude
		// "not found" (after a lost answer that would create it again).
		r, found, err := wrong.Find(ctx, other)
		if e := downstream.Classify(err); err == nil || found || e.Class != downstream.Transient || !strings.Contains(err.Error(), "custom field 999") {
			t.Fatalf("Find through an unknown field = %+v, %v, %v; want a transient error naming the field", r, found, err)
		}
		if n := len(issues(t, p)); n != 2 {
			t.Fatalf("%d issues, want 2", n)
		}
	})

	t.Run("tracker the project does not enable", func(t *testing.T) {
		p := project(t, []int{1})
		tg := newTarget(t, func(c *redmine.Config) { c.Project, c.TrackerID = p, 2 })
		if _, err := tg.Deliver(ctx, downstreamtest.NewDelivery("tracker")); err != nil {
			t.Fatal(err)
		}
		if is := issues(t, p); len(is) != 1 || is[0].Tracker.ID != 1 {
			t.Fatalf("issues %+v; want one, with the project's tracker 1", is)
		}
	})

	t.Run("long title", func(t *testing.T) {
		var p string
		tg := newTarget(t, func(c *redmine.Config) { c.CustomFieldID = 0; p = c.Project })
		d := downstreamtest.NewDelivery("long")
		d.Ticket.Title = strings.Repeat("é", 400)
		if _, err := tg.Deliver(ctx, d); err != nil {
			t.Fatal(err)
		}
		is := issues(t, p)
		if len(is) != 1 || utf8.RuneCountInString(is[0].Subject) != redmine.MaxSubject || !strings.HasSuffix(is[0].Subject, redmine.SubjectMarker(d.Key)) {
			t.Fatalf("issues %+v; want one whose subject is cut to %d characters, ending with the marker", is, redmine.MaxSubject)
		}
		if _, found, err := tg.Find(ctx, d); err != nil || !found {
			t.Fatalf("Find = %v, %v", found, err)
		}
	})

	t.Run("errors", func(t *testing.T) {
		bad := newTarget(t, func(c *redmine.Config) { c.APIKey = downstream.NewSecret("0000000000000000000000000000000000000000") })
		_, err := bad.Deliver(ctx, downstreamtest.NewDelivery("auth"))
		if e := downstream.Classify(err); err == nil || e.Class != downstream.Auth || e.StatusCode != 401 {
			t.Errorf("a wrong key: %v; want auth 401", err)
		}
		gone := newTarget(t, func(c *redmine.Config) { c.Project = "no-such-project" })
		_, err = gone.Deliver(ctx, downstreamtest.NewDelivery("gone"))
		if e := downstream.Classify(err); err == nil || e.Class != downstream.Permanent || e.StatusCode != 422 || !strings.Contains(err.Error(), "Project cannot be blank") {
			t.Errorf("create in an unknown project: %v; want permanent 422 Project cannot be blank", err)
		}
		_, _, err = gone.Find(ctx, downstreamtest.NewDelivery("gone"))
		if e := downstream.Classify(err); err == nil || e.Class != downstream.Permanent || e.StatusCode != 404 {
			t.Errorf("lookup in an unknown project: %v; want permanent 404", err)
		}
		d := downstreamtest.NewDelivery("priority")
		d.Ticket.Priority = "urgent"
		var p string
		prio := newTarget(t, func(c *redmine.Config) { c.PriorityIDs = map[string]int{"urgent": 99}; p = c.Project })
		_, err = prio.Deliver(ctx, d)
		if e := downstream.Classify(err); err == nil || e.Class != downstream.Permanent || e.StatusCode != 422 || !strings.Contains(err.Error(), "Priority cannot be blank") {
			t.Errorf("an unknown priority: %v; want permanent 422 Priority cannot be blank", err)
		}
		if n := len(issues(t, p)); n != 0 {
			t.Errorf("%d issues after the rejected create, want 0", n)
		}
	})
}
