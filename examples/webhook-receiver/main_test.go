package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"ticketrelay/delivery/downstream"
	"ticketrelay/delivery/downstream/downstreamtest"
	"ticketrelay/delivery/downstream/webhook"
)

const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// memStore is what the receiver's create writes to; hold, when set, makes a
// create wait until it is closed.
type memStore struct {
	mu      sync.Mutex
	tickets []Payload
	hold    chan struct{}
	started chan struct{}
}

func (s *memStore) create(_ string, _ [32]byte, p Payload) (string, error) {
	s.mu.Lock()
	hold, started := s.hold, s.started
	s.mu.Unlock()
	if hold != nil {
		close(started)
		<-hold
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tickets = append(s.tickets, p)
	return "T-" + strconv.Itoa(len(s.tickets)), nil
}

func (s *memStore) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.tickets)
}

func (s *memStore) first() Ticket {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tickets[0].Data
}

// start serves a receiver with the signing secret on 127.0.0.1 and returns
// its /tickets URL.
func start(t *testing.T, s *memStore) string {
	t.Helper()
	mux := http.NewServeMux()
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	rcv, err := NewReceiver(secret, srv.URL+"/tickets", time.Now, slog.New(slog.NewTextHandler(io.Discard, nil)), s.create)
	if err != nil {
		t.Fatal(err)
	}
	mux.Handle("POST /tickets", rcv)
	return srv.URL + "/tickets"
}

// target is the dispatcher's own webhook adapter, configured as
// examples/webhook.yaml configures it.
func target(t *testing.T, url, signingSecret string) *webhook.Target {
	t.Helper()
	cfg := webhook.Config{Name: "hook", URL: url}
	if signingSecret != "" {
		cfg.SigningSecret = downstream.NewSecret(signingSecret)
	}
	tg, err := webhook.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return tg
}

// A ticket sent again (the dispatcher's resend after a lost answer, with
// the same key) is created once, and the resend gets the first answer: the
// id and URL the dispatcher records.
func TestRedeliveryIsDeduped(t *testing.T) {
	s := &memStore{}
	url := start(t, s)
	tg := target(t, url, secret)
	d := downstreamtest.NewDelivery("req-redelivered")
	first, err := tg.Deliver(context.Background(), d)
	if err != nil {
		t.Fatal(err)
	}
	if first.ExternalID != "T-1" || first.URL != url+"/T-1" {
		t.Fatalf("receipt %+v: want external_id T-1 and its URL", first)
	}
	d.Attempt = 2
	again, err := tg.Deliver(context.Background(), d)
	if err != nil {
		t.Fatal(err)
	}
	if again != first || s.count() != 1 {
		t.Fatalf("resend: receipt %+v (first %+v), %d tickets stored; want the first answer and one ticket", again, first, s.count())
	}
	if got := s.first(); got.RequestID != d.Ticket.RequestID || got.Title != d.Ticket.Title || got.TicketID != d.Ticket.ID {
		t.Fatalf("stored %+v; want the delivery's ticket", got)
	}
	// Another ticket is another key: created.
	if r, err := tg.Deliver(context.Background(), downstreamtest.NewDelivery("req-other")); err != nil || r.ExternalID != "T-2" {
		t.Fatalf("another ticket: %+v, %v", r, err)
	}
}

// A request signed with another secret, or not signed, is refused: the
// dispatcher takes the 401 as an auth failure (failed for good, counted).
func TestBadSignatureIsRefused(t *testing.T) {
	s := &memStore{}
	url := start(t, s)
	for name, tg := range map[string]*webhook.Target{
		"other secret": target(t, url, "whsec_"+strings.Repeat("A", 32)),
		"unsigned":     target(t, url, ""),
	} {
		_, err := tg.Deliver(context.Background(), downstreamtest.NewDelivery("req-forged"))
		var e *downstream.Error
		if !errors.As(err, &e) || e.Class != downstream.Auth || e.StatusCode != http.StatusUnauthorized || !strings.Contains(e.Error(), "webhook signature") {
			t.Errorf("%s: %v; want an auth error (HTTP 401) about the signature", name, err)
		}
	}
	if s.count() != 0 {
		t.Fatalf("%d tickets stored from refused requests", s.count())
	}
}

// A resend while the first request with its key is still being processed
// is answered 409: the dispatcher retries it later (transient, not acted)
// and it then gets the first answer. The key with another body is 422,
// failed for good.
func TestResendWhileProcessing(t *testing.T) {
	s := &memStore{hold: make(chan struct{}), started: make(chan struct{})}
	url := start(t, s)
	tg := target(t, url, secret)
	d := downstreamtest.NewDelivery("req-slow")
	done := make(chan error, 1)
	go func() {
		_, err := tg.Deliver(context.Background(), d)
		done <- err
	}()
	select {
	case <-s.started:
	case <-time.After(10 * time.Second):
		t.Fatal("the first request did not reach create")
	}
	d2 := d
	d2.Attempt = 2
	_, err := tg.Deliver(context.Background(), d2)
	var e *downstream.Error
	if !errors.As(err, &e) || e.Class != downstream.Transient || e.MayHaveActed || e.StatusCode != http.StatusConflict || e.RetryAfter != time.Second {
		t.Fatalf("resend while processing: %v; want transient 409, not acted, after 1s", err)
	}
	other := d
	other.Ticket.Title = "another title"
	if _, err := tg.Deliver(context.Background(), other); !errors.As(err, &e) || e.Class != downstream.Permanent || e.StatusCode != http.StatusUnprocessableEntity {
		t.Fatalf("same key, another body: %v; want permanent 422", err)
	}
	s.mu.Lock()
	close(s.hold)
	s.hold = nil
	s.mu.Unlock()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the first request did not end")
	}
	if r, err := tg.Deliver(context.Background(), d2); err != nil || r.ExternalID != "T-1" {
		t.Fatalf("resend after the first ended: %+v, %v; want the first answer, T-1", r, err)
	}
	if s.count() != 1 {
		t.Fatalf("%d tickets stored; want 1", s.count())
	}
}

func TestNewReceiverRefusesAMalformedSecret(t *testing.T) {
	for _, bad := range []string{"MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whsec_not base64", "whsec_c2hvcnQ="} {
		if _, err := NewReceiver(bad, "", time.Now, slog.New(slog.NewTextHandler(io.Discard, nil)), nil); err == nil {
			t.Errorf("secret %q accepted", bad)
		}
	}
}
