package outbox

import (
	"go.opentelemetry.io/otel/trace"

	"ticketrelay/tracing"
)

// startPublishSpans starts a publish span for each traced message of a
// batch, named by the subject the broker sees (subject of the row's; nil:
// the row's own), and has the message carry that span's context to the
// forwarder; nil while tracing is off.
func startPublishSpans(msgs []Message, subject func(string) string) []trace.Span {
	if !tracing.Enabled() {
		return nil
	}
	spans := make([]trace.Span, len(msgs))
	for i := range msgs {
		m := &msgs[i]
		name := m.Subject
		if subject != nil {
			name = subject(name)
		}
		spans[i], m.TraceParent, m.TraceState = tracing.StartPublish(m.RequestID, name, m.Generation, m.TraceParent, m.TraceState)
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
