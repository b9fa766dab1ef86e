package tracing

import (
	"net/http"
	"strconv"

	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// Transport wraps an HTTP target's transport: each call made within a
// delivery attempt's span gets a client span of its own, and the request
// carries its traceparent to the downstream. Off, rt itself.
func Transport(rt http.RoundTripper, target string) http.RoundTripper {
	if !Enabled() {
		return rt
	}
	return &transport{rt: rt, target: target}
}

type transport struct {
	rt     http.RoundTripper
	target string
}

func (t *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	if !trace.SpanFromContext(ctx).SpanContext().IsValid() {
		return t.rt.RoundTrip(req) // not part of a delivery: a start-up check
	}
	// The URL's path and query may name the ticket's project or carry an
	// API key: the span names the host only.
	ctx, span := tr().Start(ctx, "HTTP "+req.Method, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(semconv.HTTPRequestMethodKey.String(req.Method), semconv.ServerAddress(req.URL.Hostname()),
			AttrTarget.String(t.target)))
	defer span.End()
	// RoundTrip must not change the caller's request: a copy carries the header.
	r := req.Clone(ctx)
	propagator.Inject(ctx, exactCarrier(r.Header))
	resp, err := t.rt.RoundTrip(r)
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
		return nil, err
	}
	span.SetAttributes(semconv.HTTPResponseStatusCode(resp.StatusCode))
	if resp.StatusCode >= 400 {
		span.SetStatus(codes.Error, strconv.Itoa(resp.StatusCode))
	}
	return resp, nil
}

// CloseIdleConnections passes through to the wrapped transport.
func (t *transport) CloseIdleConnections() {
	if c, ok := t.rt.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}
