package audit_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"ticketrelay/delivery/audit"
	"ticketrelay/internal/archetype"
	"ticketrelay/store/outbox"
	"ticketrelay/ticket"
	"ticketrelay/tracing/tracingtest"
)

// A message the stream lost is published again in a new trace linked to
// the one the ticket was accepted in (decision 0162, as a redrive): the
// republished message carries the new trace's traceparent, and the
// relay's publish span links to the stored context.
func TestRepublishIsANewTraceLinkedToTheTicketsTrace(t *testing.T) {
	exp, tp := tracingtest.Enable(t, "audit-host")
	w := newWorld(t)

	ctx, call := tp.Tracer("agent").Start(context.Background(), "tools/call create_ticket_local")
	r := ticket.Request{RequestID: "traced-1", Tool: "create_ticket_local", Target: "local", Title: "Ticket traced-1"}
	if err := r.Normalize(); err != nil {
		t.Fatal(err)
	}
	if _, err := w.l.Create(ctx, r); err != nil {
		t.Fatal(err)
	}
	call.End()
	accepted := call.SpanContext()
	w.allPublished(t, []string{r.RequestID})
	if got := w.traceparent(t, r.RequestID); traceOf(got) != accepted.TraceID().String() {
		t.Fatalf("first publish carried traceparent %q, want the accepting call's trace %s", got, accepted.TraceID())
	}

	w.lose(t, r.RequestID)
	clock := time.Now().Add(10 * time.Minute)
	a, err := audit.New(archetype.Archetype{Logger: w.log, Metrics: w.m, Now: func() time.Time { return clock }},
		audit.Config{After: 5 * time.Minute}, w.l, w.check, func() bool { return true })
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Round(context.Background()); err != nil {
		t.Fatal(err)
	}
	w.wantRepublished(t, []string{r.RequestID}, r.RequestID)
	w.allPublished(t, []string{r.RequestID})

	sent := w.traceparent(t, r.RequestID)
	again := traceOf(sent)
	if again == "" || again == accepted.TraceID().String() {
		t.Fatalf("the republished message carried traceparent %q: want a new trace", sent)
	}
	for _, s := range exp.GetSpans() {
		if s.SpanContext.TraceID().String() != again || !strings.HasPrefix(s.Name, "publish ") {
			continue
		}
		if s.Parent.IsValid() {
			t.Errorf("the republish span is a child of %s: want the root of a new trace", s.Parent.SpanID())
		}
		for _, l := range s.Links {
			if l.SpanContext.TraceID() == accepted.TraceID() && l.SpanContext.SpanID() == accepted.SpanID() {
				return
			}
		}
		t.Fatalf("the republish span links to %+v, not to the accepting call %s", s.Links, accepted.SpanID())
	}
	t.Fatalf("no publish span in the republished message's trace %s", again)
}

// traceparent is the traceparent header of the message the stream holds
// for id now.
func (w *world) traceparent(t *testing.T, id string) string {
	t.Helper()
	m, err := w.stream.GetMsg(context.Background(), w.row(t, id).seq)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := m.Header.Get("Nats-Msg-Id"), (outbox.Message{RequestID: id, Generation: w.row(t, id).generation}).MsgID(); got != want {
		t.Fatalf("the stream holds %s at %s's sequence, want %s", got, id, want)
	}
	return m.Header.Get("traceparent")
}

// traceOf is a W3C traceparent's trace id ("" when it is not one).
func traceOf(traceparent string) string {
	if p := strings.Split(traceparent, "-"); len(p) == 4 && len(p[1]) == 32 {
		return p[1]
	}
	return ""
}
