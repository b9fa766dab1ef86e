package clusterrec_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"

	"ticketrelay/internal/archetype"
	"ticketrelay/store/clusterrec"
	"ticketrelay/testkit/e2eproc"
	"ticketrelay/testkit/fixture"
)

// BenchmarkFrontCreate is a create's latency through the cluster record
// on one embedded server: the claim, the index key written beside it,
// the ledger's commit and the accept.
func BenchmarkFrontCreate(b *testing.B) {
	ctx := context.Background()
	js := e2eproc.JetStream(b, fixture.StartNATS(b).URL, nats.MaxReconnects(-1))
	s, err := clusterrec.Open(ctx, archetype.Archetype{Logger: discard()}, js, clusterrec.Config{Installation: "test", Host: "host-a", Replicas: 1})
	if err != nil {
		b.Fatal(err)
	}
	front := clusterrec.NewFront(archetype.Archetype{Logger: discard()}, s, fixture.NewLedger(b).Ledger)
	b.ResetTimer()
	for i := range b.N {
		if _, err := front.Create(ctx, newRequest(fmt.Sprintf("bench-%d", i), "checkout returns 500")); err != nil {
			b.Fatal(err)
		}
	}
}
