package webhook_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"ticketrelay/delivery/downstream"
	"ticketrelay/delivery/downstream/webhook"
	"ticketrelay/ticket"
)

// BenchmarkDeliver is one delivery over a kept-alive connection to a
// receiver that answers 200 at once, with the client the dispatcher builds
// for a target (a timeout of its own): the adapter's and net/http's share
// of a delivery's CPU and garbage.
func BenchmarkDeliver(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusOK)
	}))
	b.Cleanup(srv.Close)
	hc := srv.Client()
	hc.Timeout = 20 * time.Second
	tg, err := webhook.New(webhook.Config{Name: "hook", URL: srv.URL + "/hook", HTTPConfig: downstream.HTTPConfig{HTTP: hc}})
	if err != nil {
		b.Fatal(err)
	}
	tk := ticket.Ticket{ID: "tkt_1", CreatedAt: time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC), Request: ticket.Request{
		RequestID: "req-1", Target: "hook", Title: "Checkout fails for EU cards", Priority: "high",
		Body: "Customers in the EU see a 502 on the last step of the checkout since the deploy at 11:40.", Labels: []string{"checkout", "eu"}}}
	ctx := context.Background()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		d := downstream.Delivery{Key: "tr-" + strconv.Itoa(i), Attempt: 1, Ticket: tk}
		if _, err := tg.Deliver(ctx, d); err != nil {
			b.Fatal(err)
		}
	}
}
