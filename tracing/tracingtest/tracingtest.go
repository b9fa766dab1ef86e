// Package tracingtest turns ticketrelay's tracing on for a test of another
// package, recording every span in memory (the OpenTelemetry SDK's
// in-memory exporter) for the test to read back.
package tracingtest

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"ticketrelay/tracing"
)

// Enable turns tracing on until t ends, every span sampled and named as
// host's, and returns the exporter that holds each ended span.
// Tracing is process-wide: a test that calls it must not run in parallel
// with another that traces.
func Enable(t testing.TB, host string) (*tracetest.InMemoryExporter, *sdktrace.TracerProvider) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	off := tracing.Use(tp, host)
	t.Cleanup(func() { off(); _ = tp.Shutdown(context.Background()) })
	return exp, tp
}
