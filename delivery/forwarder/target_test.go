package forwarder_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"ticketrelay/request"
	"ticketrelay/store/outbox"
	"ticketrelay/ticket"
)

// Whoever reaches the NATS port can publish on any subject. A message
// naming a request bound to another target is never delivered to the
// target whose subject it came on: the ledger says where a ticket goes.
func TestMessageOnAnotherTargetsSubjectNotDelivered(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	api := newKeyedAPI("tracker")
	e.startForwarder(t, testConfig(), api)
	id := e.create(t, "hook") // no forwarder serves hook here
	ref, err := json.Marshal(ticket.Ref{RequestID: id})
	if err != nil {
		t.Fatal(err)
	}
	e.publishRaw(t, outbox.SubjectFor(api.name), "forged-"+id, ref)

	waitFor(t, 15*time.Second, "the forged message skipped", func() bool {
		return testutil.ToFloat64(e.m.RedeliveredSkipped.WithLabelValues(api.name)) == 1
	})
	e.waitConsumerIdle(t, api.name)
	if n := len(api.Calls()); n != 0 {
		t.Fatalf("%d calls to %s for a ticket bound to hook, want 0", n, api.name)
	}
	if st := e.find(t, id); st.Status == request.StatusDelivered || st.Target != "hook" {
		t.Fatalf("status %+v: want it still on its way to hook", st)
	}
	// The consumer goes on with its own messages.
	e.waitStatus(t, e.create(t, api.name), request.StatusDelivered)
}
