package tracing

import (
	"context"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
)

// LogHandler wraps h so that a line logged with a context (InfoContext…)
// inside a span carries its trace_id and span_id; off, h's line as it is.
func LogHandler(h slog.Handler) slog.Handler { return logHandler{h} }

type logHandler struct{ slog.Handler }

func (l logHandler) Handle(ctx context.Context, r slog.Record) error {
	if !Enabled() {
		return l.Handler.Handle(ctx, r)
	}
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		r.AddAttrs(slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String()))
	}
	return l.Handler.Handle(ctx, r)
}

func (l logHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return logHandler{l.Handler.WithAttrs(as)}
}

func (l logHandler) WithGroup(name string) slog.Handler { return logHandler{l.Handler.WithGroup(name)} }

// Logger is log with sc's trace_id, for lines logged without a context:
// log itself when sc is not valid.
func Logger(log *slog.Logger, sc trace.SpanContext) *slog.Logger {
	if !sc.IsValid() {
		return log
	}
	return log.With("trace_id", sc.TraceID().String())
}

// Observe records v in o, with ctx's trace id as its exemplar when ctx's
// span is sampled: Prometheus then links the histogram's bucket to the trace.
func Observe(ctx context.Context, o prometheus.Observer, v float64) {
	if Enabled() {
		if sc := trace.SpanContextFromContext(ctx); sc.IsSampled() {
			if e, ok := o.(prometheus.ExemplarObserver); ok {
				e.ObserveWithExemplar(v, prometheus.Labels{"trace_id": sc.TraceID().String()})
				return
			}
		}
	}
	o.Observe(v)
}
