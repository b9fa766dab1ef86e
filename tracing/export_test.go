package tracing

import (
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// Enable turns tracing on with tp for a test, and returns what turns it off.
func Enable(tp *sdktrace.TracerProvider) (off func()) {
	tracer.Store(&tracerBox{t: tp.Tracer(Scope)})
	h := "test-host"
	host.Store(&h)
	enabled.Store(true)
	return func() {
		enabled.Store(false)
		tracer.Store(nil)
		host.Store(nil)
	}
}
