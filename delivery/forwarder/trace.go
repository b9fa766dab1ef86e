package forwarder

import (
	"context"

	"go.opentelemetry.io/otel/trace"

	"ticketrelay/tracing"
)

// startAttempt starts a's span (tracing.StartAttempt): within the trace
// its message carries on the first delivery, a new trace linked to it on
// a redelivery. Off, ctx as it is and a span that costs nothing to end.
func startAttempt(ctx context.Context, a *attempt) (context.Context, trace.Span) {
	if !tracing.Enabled() {
		return ctx, trace.SpanFromContext(ctx)
	}
	var delivered uint64
	if md, err := a.msg.Metadata(); err == nil {
		delivered = md.NumDelivered
	}
	ctx, span := tracing.StartAttempt(ctx, a.msg.Headers(), delivered, a.t.Name(), a.requestID)
	a.trace = span.SpanContext()
	return ctx, span
}
