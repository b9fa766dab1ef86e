package tracing

import (
	"context"
	"net/http"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// propagator reads and writes W3C trace context and baggage: the MCP
// request's _meta (SEP-414), HTTP headers, the NATS message's headers.
var propagator = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})

// The W3C names, the same in _meta, in HTTP and in NATS headers.
const (
	headerTraceparent = "traceparent"
	headerTracestate  = "tracestate"
	headerBaggage     = "baggage"
)

// metaCarrier reads a request's _meta: string values under the W3C names.
type metaCarrier map[string]any

func (m metaCarrier) Get(k string) string {
	s, _ := m[k].(string)
	return s
}
func (m metaCarrier) Set(k, v string) { m[k] = v }
func (m metaCarrier) Keys() []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	return keys
}

// exactCarrier is a header map whose names are written as given (NATS
// headers are case-sensitive; the W3C names are lower case), and read as
// given or in HTTP's canonical form.
type exactCarrier map[string][]string

func (h exactCarrier) Get(k string) string {
	if v := h[k]; len(v) > 0 {
		return v[0]
	}
	return http.Header(h).Get(k)
}
func (h exactCarrier) Set(k, v string) { h[k] = []string{v} }
func (h exactCarrier) Keys() []string {
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	return keys
}

// CallerContext is ctx with the trace context the caller sent, if any:
// the MCP request's _meta first (SEP-414: traceparent, tracestate,
// baggage), then the HTTP request's headers. Off, ctx as it is.
func CallerContext(ctx context.Context, meta map[string]any, header http.Header) context.Context {
	if !Enabled() {
		return ctx
	}
	if s, _ := meta[headerTraceparent].(string); s != "" {
		if c := propagator.Extract(ctx, metaCarrier(meta)); trace.SpanContextFromContext(c).IsValid() {
			return c
		}
	}
	if header != nil && header.Get(headerTraceparent) != "" {
		return propagator.Extract(ctx, propagation.HeaderCarrier(header))
	}
	return ctx
}

// Stored is the trace context of ctx's span as it is kept beside an
// outbox row: its traceparent and tracestate; both empty when ctx has no
// span (tracing off, or a write that no call made).
func Stored(ctx context.Context) (traceparent, tracestate string) {
	if !Enabled() {
		return "", ""
	}
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return "", ""
	}
	c := make(propagation.MapCarrier, 2)
	propagation.TraceContext{}.Inject(ctx, c)
	return c[headerTraceparent], c[headerTracestate]
}

// restored is the remote span context a stored or sent traceparent names.
func restored(traceparent, tracestate string) trace.SpanContext {
	if traceparent == "" {
		return trace.SpanContext{}
	}
	c := propagation.MapCarrier{headerTraceparent: traceparent}
	if tracestate != "" {
		c[headerTracestate] = tracestate
	}
	return trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), c))
}

// SetHeaders writes the trace context (traceparent, tracestate) into a
// NATS message's headers, under the W3C names; nothing for an empty one.
func SetHeaders(h map[string][]string, traceparent, tracestate string) {
	if traceparent == "" {
		return
	}
	h[headerTraceparent] = []string{traceparent}
	if tracestate != "" {
		h[headerTracestate] = []string{tracestate}
	}
}

// fromHeaders is the span context a NATS message's headers carry.
func fromHeaders(h map[string][]string) trace.SpanContext {
	c := exactCarrier(h)
	return restored(c.Get(headerTraceparent), c.Get(headerTracestate))
}
