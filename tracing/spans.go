package tracing

import (
	"context"
	"net/http"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// The attributes of ticketrelay's spans. None carries a token, a secret or
// the ticket's content: a request is named by its scoped id and ticket id.
const (
	AttrRequestID = attribute.Key("ticketrelay.request_id") // the scoped request id
	AttrTicketID  = attribute.Key("ticketrelay.ticket_id")
	AttrTarget    = attribute.Key("ticketrelay.target")
	AttrAttempt   = attribute.Key("ticketrelay.attempt")
	AttrOutcome   = attribute.Key("ticketrelay.outcome")
	AttrHost      = attribute.Key("ticketrelay.host")
	AttrOps       = attribute.Key("ticketrelay.batch.ops")  // a group commit's operations
	AttrDelivered = attribute.Key("ticketrelay.delivered")  // how many times JetStream delivered the message
	AttrRedrive   = attribute.Key("ticketrelay.generation") // the operator's redrives of the request
	AttrTool      = attribute.Key("gen_ai.tool.name")       // OpenTelemetry's MCP conventions
	AttrMethod    = attribute.Key("mcp.method.name")
)

// offSpan is what the Start functions return while tracing is off: a
// noop span, which costs nothing to end. Not the span ctx may hold: no
// lookup in the caller's context, and ending it cannot end an enclosing span.
var offSpan trace.Span = noop.Span{}

// End ends span, marking it failed when err is not nil.
func End(span trace.Span, err error) {
	if err != nil && span.IsRecording() {
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// StartToolCall starts the span of an MCP tools/call of tool, a child of
// the caller's trace context when the request carries one (CallerContext),
// else the root of a new trace.
func StartToolCall(ctx context.Context, tool string, meta map[string]any, header http.Header) (context.Context, trace.Span) {
	if !Enabled() {
		return ctx, offSpan
	}
	ctx = CallerContext(ctx, meta, header)
	return tr().Start(ctx, "tools/call "+tool, trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(AttrMethod.String("tools/call"), AttrTool.String(tool)))
}

// Request names the request ctx's span is about: its scoped id, ticket id
// and target.
func Request(ctx context.Context, scopedID, ticketID, target string) {
	if !Enabled() {
		return
	}
	if s := trace.SpanFromContext(ctx); s.IsRecording() {
		s.SetAttributes(AttrRequestID.String(scopedID), AttrTicketID.String(ticketID), AttrTarget.String(target))
	}
}

// Outcome says how ctx's span's work ended: a tool call's result word, a
// delivery attempt's outcome.
func Outcome(ctx context.Context, outcome string) {
	if !Enabled() {
		return
	}
	if s := trace.SpanFromContext(ctx); s.IsRecording() {
		s.SetAttributes(AttrOutcome.String(outcome))
	}
}

// Attempt numbers ctx's delivery attempt as the ledger counts it.
func Attempt(ctx context.Context, n int) {
	if !Enabled() {
		return
	}
	if s := trace.SpanFromContext(ctx); s.IsRecording() {
		s.SetAttributes(AttrAttempt.Int(n))
	}
}

// Caller is the span a write to the group commit is submitted from, for
// StartCommit's links; nil while tracing is off, without looking ctx up.
func Caller(ctx context.Context) trace.Span {
	if !Enabled() {
		return nil
	}
	return trace.SpanFromContext(ctx)
}

// StartCommit starts the span of one group commit of ops operations, if
// any of them was submitted by a recording span (caller(i), nil for none):
// one commit serves many calls, so it is the child of none of them. It
// links to each, and each links back to it. nil when there is nothing to
// trace.
func StartCommit(ops int, caller func(i int) trace.Span) trace.Span {
	if !Enabled() {
		return nil
	}
	var links []trace.Link
	for i := range ops {
		if s := caller(i); s != nil && s.IsRecording() {
			links = append(links, trace.Link{SpanContext: s.SpanContext()})
		}
	}
	if len(links) == 0 {
		return nil
	}
	_, span := tr().Start(context.Background(), "ledger commit", trace.WithNewRoot(), trace.WithLinks(links...),
		trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(AttrOps.Int(ops)))
	commit := trace.Link{SpanContext: span.SpanContext()}
	for i := range ops {
		if s := caller(i); s != nil && s.IsRecording() {
			s.AddLink(commit)
		}
	}
	return span
}

// EndCommit ends a span StartCommit started (nil: nothing).
func EndCommit(span trace.Span, err error) {
	if span != nil {
		End(span, err)
	}
}

// StartPublish starts the relay's span for publishing one outbox row,
// whose stored trace context is traceparent/tracestate (empty: the row
// was written untraced, and nothing is started). A first publish is a
// child of the call that accepted the request; an operator's redrive
// (generation > 0) is a new trace linked to it: the original trace ended
// long ago. It returns the trace context to send with the message.
func StartPublish(requestID, subject string, generation int, traceparent, tracestate string) (span trace.Span, sendParent, sendState string) {
	if !Enabled() || traceparent == "" {
		return nil, traceparent, tracestate
	}
	stored := restored(traceparent, tracestate)
	if !stored.IsValid() {
		return nil, "", ""
	}
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(AttrRequestID.String(requestID), semconv.MessagingSystemKey.String("nats"),
			semconv.MessagingDestinationName(subject), AttrRedrive.Int(generation), AttrHost.String(hostName()))}
	ctx := context.Background()
	if generation == 0 {
		ctx = trace.ContextWithRemoteSpanContext(ctx, stored)
	} else {
		opts = append(opts, trace.WithNewRoot(), trace.WithLinks(trace.Link{SpanContext: stored}))
	}
	ctx, span = tr().Start(ctx, "publish "+subject, opts...)
	sendParent, sendState = Stored(ctx)
	return span, sendParent, sendState
}

// StartAttempt starts the span of one forwarder attempt at a message whose
// headers are h, delivered by JetStream for the delivered-th time. The
// first delivery continues the trace the message carries; a redelivery (a
// retry after its backoff, a lost ack, another host taking over) is a new
// trace linked to it, so that the original is not held open for hours.
func StartAttempt(ctx context.Context, h map[string][]string, delivered uint64, target, requestID string) (context.Context, trace.Span) {
	if !Enabled() {
		return ctx, offSpan
	}
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(AttrTarget.String(target), AttrRequestID.String(requestID),
			AttrDelivered.Int64(int64(delivered)), AttrHost.String(hostName()))}
	if sent := fromHeaders(h); sent.IsValid() {
		if delivered <= 1 {
			ctx = trace.ContextWithRemoteSpanContext(ctx, sent)
		} else {
			opts = append(opts, trace.WithNewRoot(), trace.WithLinks(trace.Link{SpanContext: sent}))
		}
	}
	return tr().Start(ctx, "deliver "+target, opts...)
}

// StartClaim starts the span of a multi-host create's claim in the
// cluster record, a child of the tool call's.
func StartClaim(ctx context.Context, scopedID string) (context.Context, trace.Span) {
	if !Enabled() {
		return ctx, offSpan
	}
	return tr().Start(ctx, "cluster claim", trace.WithAttributes(AttrRequestID.String(scopedID), AttrHost.String(hostName())))
}

// StartAdoption starts the span of a host's adoption of request scopedID
// from host lost: a new trace, linked to the claiming call's
// (traceparent, from the cluster record; "" for none). The adopting
// host's commit stores it, so the delivery continues this trace.
func StartAdoption(ctx context.Context, scopedID, lost, traceparent string) (context.Context, trace.Span) {
	if !Enabled() {
		return ctx, offSpan
	}
	opts := []trace.SpanStartOption{trace.WithNewRoot(), trace.WithAttributes(AttrRequestID.String(scopedID),
		AttrHost.String(hostName()), attribute.String("ticketrelay.adopted_from", lost))}
	if sc := restored(traceparent, ""); sc.IsValid() {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: sc}))
	}
	return tr().Start(ctx, "cluster adopt", opts...)
}
