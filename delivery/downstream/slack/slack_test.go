package slack_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"ticketrelay/delivery/downstream"
	"ticketrelay/delivery/downstream/downstreamtest"
	"ticketrelay/delivery/downstream/slack"
	"ticketrelay/delivery/downstream/slack/slacktest"
)

func newTarget(t *testing.T, url string) *slack.Target {
	t.Helper()
	tg, err := slack.New(slack.Config{Name: "alerts", WebhookURL: downstream.NewSecret(url)})
	if err != nil {
		t.Fatal(err)
	}
	return tg
}

func TestConformance(t *testing.T) {
	downstreamtest.Run(t, func(t *testing.T) downstreamtest.Harness {
		f := slacktest.New(t)
		return downstreamtest.Harness{
			Target:      newTarget(t, f.URL()),
			Faults:      &f.Faults,
			Count:       f.Count,
			BadAuth:     newTarget(t, f.WrongSecretURL()),
			Unreachable: newTarget(t, "http://"+downstreamtest.ClosedAddr(t)+slacktest.HookPath),
			// Every ticket renders to a valid message: the permanent
			// rejection is the channel's (archived).
			Invalid:        func(*downstream.Delivery) { f.Archive() },
			InvalidMessage: "channel_is_archived",
			NoExternalID:   true,
		}
	})
}

func TestMessage(t *testing.T) {
	f := slacktest.New(t)
	d := downstreamtest.NewDelivery("req-msg")
	d.Ticket.Title = "a <b> & c"
	if _, err := newTarget(t, f.URL()).Deliver(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	m := f.Messages()
	if len(m) != 1 || !strings.Contains(m[0], "a &lt;b&gt; &amp; c") || !strings.Contains(m[0], d.Ticket.ID) || !strings.Contains(m[0], "[high]") {
		t.Fatalf("messages %q: want the escaped title, priority and ticket id", m)
	}
}

func TestUnknownHookIsAuth(t *testing.T) {
	f := slacktest.New(t)
	_, err := newTarget(t, strings.Replace(f.URL(), "T0000TEAM", "TOTHER", 1)).Deliver(context.Background(), downstreamtest.NewDelivery("req-x"))
	if e := downstream.Classify(err); e.Class != downstream.Auth || e.StatusCode != 404 || !strings.Contains(e.Error(), "no_service") {
		t.Fatalf("unknown hook: %v; want auth, 404 no_service", err)
	}
}

func TestHookURLNeverPrinted(t *testing.T) {
	f := slacktest.New(t)
	tg := newTarget(t, f.URL())
	for _, verb := range []string{"%v", "%+v", "%#v"} {
		if out := fmt.Sprintf(verb, tg); strings.Contains(out, "s3cr3t") {
			t.Fatalf("%s prints the hook URL: %s", verb, out)
		}
	}
	f.Faults.Next(downstreamtest.LoseResponse)
	_, err := tg.Deliver(context.Background(), downstreamtest.NewDelivery("req-leak"))
	if err == nil || strings.Contains(err.Error(), "s3cr3t") {
		t.Fatalf("a transport error names the hook URL: %v", err)
	}
	if _, err := slack.New(slack.Config{Name: "x", WebhookURL: downstream.NewSecret("hooks.example/x")}); err == nil {
		t.Fatal("New accepted a URL without a scheme")
	}
}

// A hook URL that does not parse is refused by New, in words that do not
// quote it: at delivery time the parse error would carry the whole secret
// URL into the ledger's last_error and find_request.
func TestMalformedHookURLNeverPrinted(t *testing.T) {
	for _, u := range []string{
		"https://hooks.slack.com/services/T0000TEAM/B0000HOOK/s3cr3t%zzValue",
		"https://hooks.slack.com:s3cr3tValue/services/T0000TEAM/B0000HOOK",
		"https://hooks.sl ack.com/services/T0000TEAM/B0000HOOK/s3cr3tValue",
	} {
		_, err := slack.New(slack.Config{Name: "alerts", WebhookURL: downstream.NewSecret(u)})
		if err == nil {
			t.Errorf("New accepted the malformed hook URL %q", u)
			continue
		}
		if s := err.Error(); strings.Contains(s, "s3cr3t") || strings.Contains(s, "services") || !strings.Contains(s, "malformed") {
			t.Errorf("New(%q): %q; want a malformed-URL error that shows none of it", u, s)
		}
	}
}

// A hook that redirects (a moved or mistyped URL) is not followed: Go would
// repost nothing but a GET. The error names neither URL.
func TestRedirectedHook(t *testing.T) {
	mux := http.NewServeMux()
	var moved atomic.Int32
	mux.HandleFunc("POST /services/T0000TEAM/B0000HOOK/s3cr3tOld", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/services/T0000TEAM/B0000HOOK/s3cr3tNew", http.StatusFound)
	})
	mux.HandleFunc("/services/T0000TEAM/B0000HOOK/s3cr3tNew", func(w http.ResponseWriter, r *http.Request) {
		moved.Add(1)
		io.WriteString(w, "ok")
	})
	srv := downstreamtest.StartServer(t, mux)
	_, err := newTarget(t, srv.URL+"/services/T0000TEAM/B0000HOOK/s3cr3tOld").Deliver(context.Background(), downstreamtest.NewDelivery("req-moved"))
	if e := downstream.Classify(err); err == nil || e.Class != downstream.Permanent || e.StatusCode != 302 || e.MayHaveActed {
		t.Fatalf("redirected hook: %v; want permanent 302, not acted", err)
	}
	if strings.Contains(err.Error(), "s3cr3t") || moved.Load() != 0 {
		t.Fatalf("redirected hook: %v (the new location saw %d requests); want no URL in the error and no request", err, moved.Load())
	}
}
