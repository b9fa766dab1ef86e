package webhook_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"ticketrelay/delivery/downstream"
	"ticketrelay/delivery/downstream/downstreamtest"
	"ticketrelay/delivery/downstream/webhook"
	"ticketrelay/delivery/downstream/webhook/webhooktest"
	"ticketrelay/testkit/testwait"
)

const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

func newTarget(t *testing.T, f *webhooktest.Fake, url, signing, token string) *webhook.Target {
	t.Helper()
	cfg := webhook.Config{Name: "hook", URL: url}
	if signing != "" {
		cfg.SigningSecret = downstream.NewSecret(signing)
	}
	if token != "" {
		cfg.Token = downstream.NewSecret(token)
	}
	tg, err := webhook.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return tg
}

func TestConformance(t *testing.T) {
	downstreamtest.Run(t, func(t *testing.T) downstreamtest.Harness {
		f := webhooktest.New(t, webhooktest.Options{SigningSecret: secret, Token: "tok"})
		return downstreamtest.Harness{
			Target:         newTarget(t, f, f.URL(), secret, "tok"),
			Faults:         &f.Faults,
			Count:          f.Count,
			BadAuth:        newTarget(t, f, f.URL(), "whsec_"+strings.Repeat("A", 32), "tok"),
			Unreachable:    newTarget(t, f, "http://"+downstreamtest.ClosedAddr(t)+webhooktest.Path, secret, "tok"),
			Invalid:        func(d *downstream.Delivery) { d.Ticket.Title = "" },
			InvalidMessage: "data.title are required",
		}
	})
}

// The Standard Webhooks specification's published test vector.
func TestSignMatchesSpecVector(t *testing.T) {
	key, err := webhook.DecodeSecret(secret)
	if err != nil {
		t.Fatal(err)
	}
	got := webhook.Sign(key, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, []byte(`{"test": 2432232314}`))
	if want := "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="; got != want {
		t.Fatalf("Sign = %s, want %s", got, want)
	}
}

func TestDecodeSecretRejects(t *testing.T) {
	for _, s := range []string{"MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whsec_not base64!", "whsec_c2hvcnQ="} {
		if _, err := webhook.DecodeSecret(s); err == nil {
			t.Errorf("DecodeSecret(%q) accepted it", s)
		}
	}
	if _, err := webhook.New(webhook.Config{Name: "h", URL: "http://x", SigningSecret: downstream.NewSecret("nope")}); err == nil {
		t.Error("New accepted a malformed signing secret")
	}
	if _, err := webhook.New(webhook.Config{Name: "h", URL: "ftp://x"}); err == nil {
		t.Error("New accepted a non-http URL")
	}
}

func TestHeadersAndPayload(t *testing.T) {
	f := webhooktest.New(t, webhooktest.Options{SigningSecret: secret})
	tg := newTarget(t, f, f.URL(), secret, "")
	d := downstreamtest.NewDelivery("req-headers")
	r, err := tg.Deliver(context.Background(), d)
	if err != nil {
		t.Fatal(err)
	}
	got := f.Deliveries()
	if len(got) != 1 {
		t.Fatalf("%d deliveries, want 1", len(got))
	}
	if got[0].Key != d.Key || got[0].WebhookID != d.Key {
		t.Fatalf("Idempotency-Key %q, webhook-id %q; want both %q", got[0].Key, got[0].WebhookID, d.Key)
	}
	if r.ExternalID != "dlv_1" || !strings.HasSuffix(r.URL, "/deliveries/dlv_1") {
		t.Fatalf("receipt %+v: want the receiver's id and url", r)
	}
	var p webhook.Payload
	if err := json.Unmarshal(got[0].Body, &p); err != nil {
		t.Fatal(err)
	}
	if p.Type != webhook.EventType || p.Data.RequestID != d.Ticket.RequestID || p.Data.Title != d.Ticket.Title {
		t.Fatalf("payload %+v does not carry the ticket", p)
	}
}

// A key reused with another payload is the receiver's 422: permanent.
func TestKeyReusedWithOtherPayload(t *testing.T) {
	f := webhooktest.New(t, webhooktest.Options{})
	tg := newTarget(t, f, f.URL(), "", "")
	d := downstreamtest.NewDelivery("req-reuse")
	if _, err := tg.Deliver(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	d.Ticket.Title = "something else"
	_, err := tg.Deliver(context.Background(), d)
	var e *downstream.Error
	if !errors.As(err, &e) || e.Class != downstream.Permanent || e.StatusCode != 422 || !strings.Contains(e.Error(), "another payload") {
		t.Fatalf("reused key: %v; want permanent 422 naming the payload", err)
	}
	if f.Count() != 1 {
		t.Fatalf("%d deliveries, want 1", f.Count())
	}
}

// The signature is computed at each attempt: a resend long after the first
// attempt still passes the receiver's 5-minute timestamp check.
func TestResendIsSignedAnew(t *testing.T) {
	clock := downstreamtest.NewClock(time.Unix(1_800_000_000, 0))
	f := webhooktest.New(t, webhooktest.Options{SigningSecret: secret, Now: clock.Now})
	tg, err := webhook.New(webhook.Config{Name: "h", URL: f.URL(), SigningSecret: downstream.NewSecret(secret), HTTPConfig: downstream.HTTPConfig{Now: clock.Now}})
	if err != nil {
		t.Fatal(err)
	}
	d := downstreamtest.NewDelivery("req-late")
	f.Faults.Next(downstreamtest.LoseResponse)
	if _, err := tg.Deliver(context.Background(), d); err == nil {
		t.Fatal("lost response succeeded")
	}
	clock.Add(time.Hour)
	d.Attempt = 2
	if _, err := tg.Deliver(context.Background(), d); err != nil {
		t.Fatalf("resend an hour later: %v", err)
	}
	if f.Count() != 1 {
		t.Fatalf("%d deliveries, want 1", f.Count())
	}
}

func TestSecretsNeverPrinted(t *testing.T) {
	tg := newTarget(t, nil, "http://127.0.0.1:1/x", secret, "tok-visible?")
	for _, verb := range []string{"%v", "%+v", "%#v", "%s"} {
		out := fmt.Sprintf(verb, tg)
		if strings.Contains(out, "MfKQ9r8G") || strings.Contains(out, "tok-visible?") {
			t.Fatalf("%s of the target prints a secret: %s", verb, out)
		}
	}
}

// A token in the query string is a credential: no error of a failed call
// shows it (Go's own errors quote the whole URL: Post "…?token=…").
func TestErrorsNeverShowTheQuery(t *testing.T) {
	const secretURL = "http://127.0.0.1:1/hook?token=SECRETVALUE"
	for _, u := range []string{secretURL, "http://user:SECRETVALUE@127.0.0.1:1/hook?token=SECRETVALUE"} {
		tg := newTarget(t, nil, u, "", "")
		_, err := tg.Deliver(context.Background(), downstreamtest.NewDelivery("req-refused"))
		if e := downstream.Classify(err); err == nil || e.Class != downstream.Transient || e.MayHaveActed {
			t.Fatalf("POST %s: %v; want transient, not acted", u, err)
		}
		if s := err.Error(); strings.Contains(s, "SECRETVALUE") || !strings.Contains(s, "127.0.0.1:1/hook") {
			t.Fatalf("the error of a refused connection shows the token, or not the endpoint: %s", s)
		}
	}
	for _, u := range []string{"http://127.0.0.1:1/ho%zzok?token=SECRETVALUE", "ftp://127.0.0.1:1/hook?token=SECRETVALUE", "http:///hook?token=SECRETVALUE"} {
		_, err := webhook.New(webhook.Config{Name: "h", URL: u})
		if err == nil || strings.Contains(err.Error(), "SECRETVALUE") {
			t.Errorf("New(%q) = %v; want an error that does not show the token", u, err)
		}
	}
}

// A receiver honouring Idempotency-Key answers 409 to a request whose key
// belongs to a request it is still processing (IETF draft: the one error a
// client may retry unchanged). Transient, not acted, after Retry-After; the
// resend with the same key gets the first request's answer, and nothing is
// delivered twice. The same key with another payload stays a permanent 422.
func TestConflictWhileProcessing(t *testing.T) {
	f := webhooktest.New(t, webhooktest.Options{ConflictRetryAfter: 3 * time.Second})
	tg := newTarget(t, f, f.URL(), "", "")
	release := f.Hold()
	d := downstreamtest.NewDelivery("req-inflight")
	type result struct {
		r   downstream.Receipt
		err error
	}
	first := make(chan result, 1)
	go func() {
		r, err := tg.Deliver(context.Background(), d)
		first <- result{r, err}
	}()
	testwait.For(t, 5*time.Second, "the first request to be in flight at the receiver", func() bool { return f.InFlight() == 1 })

	d2 := d
	d2.Attempt = 2
	_, err := tg.Deliver(context.Background(), d2)
	var e *downstream.Error
	if !errors.As(err, &e) || e.Class != downstream.Transient || e.MayHaveActed || e.StatusCode != 409 ||
		e.RetryAfter != 3*time.Second || !strings.Contains(e.Error(), "still being processed") {
		t.Fatalf("resend while the first is processed: %v; want transient 409, not acted, retry after 3s", err)
	}
	other := d
	other.Ticket.Title = "something else"
	_, err = tg.Deliver(context.Background(), other)
	if !errors.As(err, &e) || e.Class != downstream.Permanent || e.StatusCode != 422 {
		t.Fatalf("same key, other payload, while the first is processed: %v; want permanent 422", err)
	}

	release()
	var r1 result
	select {
	case r1 = <-first:
	case <-time.After(10 * time.Second):
		t.Fatal("the first request did not end after release")
	}
	if r1.err != nil || r1.r.ExternalID != "dlv_1" {
		t.Fatalf("first request: %+v, %v; want dlv_1", r1.r, r1.err)
	}
	r2, err := tg.Deliver(context.Background(), d2)
	if err != nil || r2.ExternalID != "dlv_1" {
		t.Fatalf("resend after the first ended: %+v, %v; want the first answer (dlv_1)", r2, err)
	}
	if f.Count() != 1 {
		t.Fatalf("%d deliveries, want 1", f.Count())
	}
}
