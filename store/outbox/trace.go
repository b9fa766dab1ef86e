package outbox

import (
	"go.opentelemetry.io/otel/trace"

	"ticketrelay/tracing"
)

// startPublishSpans starts a publish span for each traced message of a
// batch and has the message carry that span's context to the forwarder;
// nil while tracing is off.
func startPublishSpans(msgs []Message) []trace.Span {
	if !tracing.Enabled() {
		return nil
	}
	spans := make([]trace.Span, len(msgs))
	for i := range msgs {
		m := &msgs[i]
		spans[i], m.TraceParent, m.TraceState = tracing.StartPublish(m.RequestID, m.Subject, m.Generation, m.TraceParent, m.TraceState)
	}
	return spans
}

// endPublishSpans ends them with the broker's answer to each message.
func endPublishSpans(spans []trace.Span, results []PublishResult) {
	for i, s := range spans {
		if s == nil {
			continue
		}
		var err error
		if i < len(results) {
			err = results[i].Err
		}
		tracing.End(s, err)
	}
}
