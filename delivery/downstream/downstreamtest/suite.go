package downstreamtest

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"ticketrelay/delivery/downstream"
	"ticketrelay/ticket"
)

// Harness is one adapter wired to a fresh fake of its API.
type Harness struct {
	// Target talks to the fake with valid credentials, through an
	// *http.Client of its own (no connection shared with another harness).
	Target downstream.Target
	// Faults is the fake's injector for create requests.
	Faults *Faults
	// Count is the number of items (tickets, issues, alerts, messages,
	// deliveries) the fake holds.
	Count func() int
	// BadAuth talks to the same fake with credentials it rejects.
	BadAuth downstream.Target
	// Unreachable points at an address where nothing listens.
	Unreachable downstream.Target
	// Invalid makes the API reject the delivery with a 4xx that retrying
	// cannot fix, by changing the delivery (or, where no delivery can be
	// invalid, the fake's state); the error must carry InvalidMessage (a
	// piece of the API's own message).
	Invalid        func(*downstream.Delivery)
	InvalidMessage string
	// NoExternalID: the API returns no id for a created item (Slack).
	NoExternalID bool
}

// ClosedAddr returns "127.0.0.1:port" where nothing listens.
func ClosedAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// NewDelivery returns the first attempt of a valid ticket with the given
// request id; its Key is downstream.Key("test", requestID).
func NewDelivery(requestID string) downstream.Delivery {
	req := ticket.Request{
		RequestID: requestID,
		Tool:      "create_ticket",
		Target:    "t",
		Title:     "Printer on floor 3 is on fire",
		Body:      "It smells of toner.\nPlease send help.",
		Priority:  "high",
		Labels:    []string{"facilities", "hardware"},
	}
	if err := req.Normalize(); err != nil {
		panic(err)
	}
	return downstream.Delivery{
		Key:     downstream.Key("test", requestID),
		Attempt: 1,
		Ticket:  ticket.Ticket{Request: req, ID: ticket.IDFor(requestID), CreatedAt: time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)},
	}
}

// Run is the conformance suite. newHarness is called once per subtest, so
// every subtest starts with an empty fake and fresh connections.
func Run(t *testing.T, newHarness func(t *testing.T) Harness) {
	t.Run("create", func(t *testing.T) {
		h := newHarness(t)
		d := NewDelivery("req-create")
		r := deliver(t, h.Target, d)
		if got := h.Count(); got != 1 {
			t.Fatalf("after one delivery the fake holds %d items, want 1", got)
		}
		if !h.NoExternalID && r.ExternalID == "" {
			t.Fatalf("receipt %+v has no external id", r)
		}
		caps := h.Target.Capabilities()
		if caps.DedupeKey {
			d.Attempt = 2
			r2 := deliver(t, h.Target, d)
			if got := h.Count(); got != 1 {
				t.Fatalf("a resend with the same key made %d items, want 1", got)
			}
			if r2.ExternalID != r.ExternalID {
				t.Fatalf("resend answered external id %q, first answer %q", r2.ExternalID, r.ExternalID)
			}
		}
		if f, ok := h.Target.(downstream.Finder); ok && caps.Lookup == downstream.LookupConsistent {
			found, ok := find(t, f, d)
			if !ok || found.ExternalID != r.ExternalID {
				t.Fatalf("Find after create = %+v, %v; want %q", found, ok, r.ExternalID)
			}
			other, ok := find(t, f, NewDelivery("req-never-sent"))
			if ok {
				t.Fatalf("Find of a key never sent found %+v", other)
			}
		}
	})

	t.Run("lost response", func(t *testing.T) {
		h := newHarness(t)
		d := NewDelivery("req-lost")
		unknownOutcome(t, h, d, LoseResponse, 1) // the fake processed the request
		if !secondAttempt(t, h, d) {
			// No key, no consistent lookup (jira, slack): the adapter said the
			// attempt may have acted, so the forwarder marks it uncertain
			// and never resends it.
			caps := h.Target.Capabilities()
			if caps.DedupeKey || caps.Lookup == downstream.LookupConsistent {
				t.Fatalf("capabilities %+v allow a resend, yet no resend was made", caps)
			}
		}
		if got := h.Count(); got != 1 {
			t.Fatalf("after the second attempt the fake holds %d items, want exactly 1", got)
		}
	})

	t.Run("reset before processing", func(t *testing.T) {
		h := newHarness(t)
		d := NewDelivery("req-reset")
		// The client cannot tell this from a reset after processing.
		unknownOutcome(t, h, d, ResetBeforeProcessing, 0)
		if secondAttempt(t, h, d) {
			if got := h.Count(); got != 1 {
				t.Fatalf("after the second attempt the fake holds %d items, want 1", got)
			}
		}
	})

	t.Run("500", func(t *testing.T) {
		h := newHarness(t)
		h.Faults.Next(ServerError)
		e := deliverErr(t, h.Target, NewDelivery("req-500"))
		if e.Class != downstream.Transient || e.StatusCode != 500 || !e.MayHaveActed {
			t.Fatalf("500: got %s HTTP %d (may have acted %v), want transient 500 that may have acted", e.Class, e.StatusCode, e.MayHaveActed)
		}
	})

	t.Run("429 with Retry-After", func(t *testing.T) {
		h := newHarness(t)
		h.Faults.SetRetryAfter(7 * time.Second)
		h.Faults.Next(RateLimited)
		e := deliverErr(t, h.Target, NewDelivery("req-429"))
		if e.Class != downstream.Transient || e.StatusCode != 429 || e.MayHaveActed || !e.Throttled || e.RetryAfter != 7*time.Second {
			t.Fatalf("429: got %s HTTP %d retry after %v (may have acted %v, throttled %v), want transient 429, 7s, not acted, throttled",
				e.Class, e.StatusCode, e.RetryAfter, e.MayHaveActed, e.Throttled)
		}
		if got := h.Count(); got != 0 {
			t.Fatalf("the fake holds %d items, want 0", got)
		}
	})

	t.Run("invalid", func(t *testing.T) {
		h := newHarness(t)
		d := NewDelivery("req-invalid")
		h.Invalid(&d)
		e := deliverErr(t, h.Target, d)
		if e.Class != downstream.Permanent || e.MayHaveActed {
			t.Fatalf("invalid: got %s (may have acted %v), want permanent: %v", e.Class, e.MayHaveActed, e)
		}
		if e.StatusCode < 400 || e.StatusCode > 499 {
			t.Fatalf("invalid: HTTP %d, want 4xx", e.StatusCode)
		}
		if !strings.Contains(e.Error(), h.InvalidMessage) {
			t.Fatalf("invalid: error %q does not carry the API's message %q", e.Error(), h.InvalidMessage)
		}
		if got := h.Count(); got != 0 {
			t.Fatalf("the fake holds %d items, want 0", got)
		}
	})

	t.Run("bad credentials", func(t *testing.T) {
		h := newHarness(t)
		e := deliverErr(t, h.BadAuth, NewDelivery("req-auth"))
		if e.Class != downstream.Auth || e.MayHaveActed {
			t.Fatalf("bad credentials: got %s (may have acted %v), want auth: %v", e.Class, e.MayHaveActed, e)
		}
		if got := h.Count(); got != 0 {
			t.Fatalf("the fake holds %d items, want 0", got)
		}
	})

	t.Run("slow answer past the deadline", func(t *testing.T) {
		h := newHarness(t)
		h.Faults.Next(Slow)
		// Long enough for the request to reach the fake on a loaded machine.
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := h.Target.Deliver(ctx, NewDelivery("req-slow"))
		if err == nil {
			t.Fatal("a slow answer past the deadline succeeded")
		}
		e := downstream.Classify(err)
		if e.Class != downstream.Transient || !e.MayHaveActed || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("slow: got %s (may have acted %v, deadline %v), want transient that may have acted: %v",
				e.Class, e.MayHaveActed, errors.Is(err, context.DeadlineExceeded), err)
		}
		if got := h.Count(); got != 1 {
			t.Fatalf("the slow fake processed the request: it holds %d items, want 1", got)
		}
	})

	t.Run("connection refused", func(t *testing.T) {
		h := newHarness(t)
		e := deliverErr(t, h.Unreachable, NewDelivery("req-refused"))
		if e.Class != downstream.Transient || e.MayHaveActed {
			t.Fatalf("connection refused: got %s (may have acted %v), want transient that did not act: %v", e.Class, e.MayHaveActed, e)
		}
	})
}

// secondAttempt does what the forwarder does after an attempt of unknown
// outcome; it reports whether a second attempt was made.
func secondAttempt(t *testing.T, h Harness, d downstream.Delivery) bool {
	t.Helper()
	caps := h.Target.Capabilities()
	d.Attempt = 2
	switch {
	case caps.DedupeKey:
		deliver(t, h.Target, d) // resend with the same key
		return true
	case caps.Lookup == downstream.LookupConsistent:
		f, ok := h.Target.(downstream.Finder)
		if !ok {
			t.Fatalf("%T declares a consistent lookup but is no downstream.Finder", h.Target)
		}
		if _, found := find(t, f, d); !found {
			deliver(t, h.Target, d) // proven absent: create it
		}
		return true
	default:
		// No key and no consistent lookup: the forwarder marks the request
		// uncertain and never resends. Nothing more to do here.
		return false
	}
}

func deliver(t *testing.T, tg downstream.Target, d downstream.Delivery) downstream.Receipt {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := tg.Deliver(ctx, d)
	if err != nil {
		t.Fatalf("Deliver (attempt %d): %v", d.Attempt, err)
	}
	return r
}

// unknownOutcome makes the next call fail with fault and checks that the
// adapter reports a transient error that may have acted (the client cannot
// tell whether the API processed the request) and that the fake holds
// items items.
func unknownOutcome(t *testing.T, h Harness, d downstream.Delivery, fault Fault, items int) {
	t.Helper()
	h.Faults.Next(fault)
	e := deliverErr(t, h.Target, d)
	if e.Class != downstream.Transient || !e.MayHaveActed {
		t.Fatalf("%s: got %s (may have acted %v), want transient that may have acted: %v", fault, e.Class, e.MayHaveActed, e)
	}
	if got := h.Count(); got != items {
		t.Fatalf("%s: the fake holds %d items, want %d", fault, got, items)
	}
}

func deliverErr(t *testing.T, tg downstream.Target, d downstream.Delivery) *downstream.Error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := tg.Deliver(ctx, d)
	if err == nil {
		t.Fatalf("Deliver succeeded (%+v); want an error", r)
	}
	var e *downstream.Error
	if !errors.As(err, &e) {
		t.Fatalf("Deliver returned %T (%v); want a *downstream.Error", err, err)
	}
	return e
}

func find(t *testing.T, f downstream.Finder, d downstream.Delivery) (downstream.Receipt, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, ok, err := f.Find(ctx, d)
	if err != nil {
		t.Fatalf("Find: %v", err)
	}
	return r, ok
}
