package tracing_test

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"ticketrelay/tracing"
)

type ctxKey int

// handlerContext is a context as deep as a tool call's in mcp-front: the
// HTTP server's, the go-sdk's and ours, a value or a cancel layer each.
func handlerContext() (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	for i := range 24 {
		ctx = context.WithValue(ctx, ctxKey(i), i)
	}
	return ctx, cancel
}

// BenchmarkOffCreatePath is what one create_ticket call does in the
// tracing package while tracing is off, in a handler's deep context: the
// tool call's span, the request's attributes and outcome, the trace
// context kept with the outbox row, the writer's note of the calling span
// and its share of a group commit. (The call's duration is observed by
// tracing.Observe as it would be without tracing: the histogram's own
// work, left out.)
func BenchmarkOffCreatePath(b *testing.B) {
	ctx, cancel := handlerContext()
	defer cancel()
	b.ReportAllocs()
	for b.Loop() {
		c, s := tracing.StartToolCall(ctx, "create_ticket", nil, nil)
		tracing.Request(c, "r", "t", "x")
		if p, _ := tracing.Stored(c); p != "" {
			b.Fatal("stored a trace context while off")
		}
		caller := tracing.Caller(c)
		tracing.EndCommit(tracing.StartCommit(1, func(int) trace.Span { return caller }), nil)
		tracing.Outcome(c, "created")
		tracing.End(s, nil)
	}
}

// Off, a Start function's span is not the one its context holds (another
// library's, or the caller's own): ending it leaves that span running, and
// the commit notes no calling span.
func TestOffLeavesTheContextsSpanAlone(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	ctx, outer := tp.Tracer("other").Start(context.Background(), "outer")
	c, s := tracing.StartAttempt(ctx, nil, 1, "x", "r")
	tracing.End(s, nil)
	_, s = tracing.StartClaim(c, "r")
	s.End()
	if n := len(exp.GetSpans()); n != 0 {
		t.Errorf("ending tracing's spans while off ended %d span(s) of the context", n)
	}
	if tracing.Caller(ctx) != nil {
		t.Error("the commit was given the context's span while tracing is off")
	}
	outer.End()
	if n := len(exp.GetSpans()); n != 1 {
		t.Errorf("%d spans ended, want the outer one", n)
	}
}
