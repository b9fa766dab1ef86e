package outbox_test

import (
	"path/filepath"
	"testing"
	"time"

	"ticketrelay/delivery/natsjs"
	"ticketrelay/installation"
	"ticketrelay/store/outbox"
	"ticketrelay/tracing/tracingtest"
)

// On a named installation the relay's publish span is named by the
// subject the message goes out on, the installation's, not the outbox
// row's: that is the subject an operator finds in the stream.
func TestPublishSpanNamesTheSubjectSent(t *testing.T) {
	exp, tp := tracingtest.Enable(t, "relay-host")
	b := startBroker(t)
	js := b.connect(t)
	inst := installation.Name("acme")
	if _, err := natsjs.EnsureStream(testCtx(t), js, natsjs.StreamConfig{Installation: inst}); err != nil {
		t.Fatal(err)
	}
	pub := natsjs.NewPublisher(js, natsjs.ForInstallation(inst))
	n := newNodeWith(t, "relay-a", filepath.Join(t.TempDir(), "tickets.db"), pub,
		outbox.RelayConfig{Subject: pub.PublishedSubject}, time.Now)
	ctx, call := tp.Tracer("agent").Start(testCtx(t), "tools/call create_ticket_local")
	if _, err := n.l.Create(ctx, newRequest("traced-1", "local")); err != nil {
		t.Fatal(err)
	}
	call.End()
	n.run(t)
	want := "publish " + inst.Subject("local")
	waitFor(t, 10*time.Second, "a publish span", func() bool {
		for _, s := range exp.GetSpans() {
			if s.Name == want {
				return true
			}
		}
		return false
	})
}
