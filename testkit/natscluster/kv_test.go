package natscluster_test

import (
	"context"
	"errors"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"ticketrelay/testkit/natscluster"
)

// TestR3BucketIsCompareAndSet: on an R3 bucket Create is a claim (a
// second Create of the key fails with ErrKeyExists) and Update with a
// stale revision fails; the stream and the bucket are replicated on three
// nodes, and the harness names the same leaders as the client API.
func TestR3BucketIsCompareAndSet(t *testing.T) {
	t.Parallel()
	c := natscluster.StartTest(t, natscluster.Config{})
	js := connect(t, c.ClientURLs())
	s, kv := setup(t, js)
	ctx, cancel := context.WithTimeout(context.Background(), electionTimeout)
	defer cancel()

	rev, err := kv.Create(ctx, "req-1", []byte("claim A"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Create(ctx, "req-1", []byte("claim B")); !errors.Is(err, jetstream.ErrKeyExists) {
		t.Fatalf("second Create = %v, want ErrKeyExists", err)
	}
	rev2, err := kv.Update(ctx, "req-1", []byte("claim A, committed"), rev)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Update(ctx, "req-1", []byte("stale writer"), rev); !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		t.Fatalf("Update at stale revision %d = %v, want ErrKeyRevisionMismatch", rev, err)
	}
	e, err := kv.Get(ctx, "req-1")
	if err != nil {
		t.Fatal(err)
	}
	if string(e.Value()) != "claim A, committed" || e.Revision() != rev2 {
		t.Fatalf("req-1 = %q at %d, want the committed claim at %d", e.Value(), e.Revision(), rev2)
	}

	for _, stream := range []string{"ORDERS", "KV_claims"} {
		info, err := js.Stream(ctx, stream)
		if err != nil {
			t.Fatal(err)
		}
		ci, err := info.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if ci.Config.Replicas != 3 || ci.Cluster == nil || len(ci.Cluster.Replicas) != 2 {
			t.Fatalf("%s: replicas %d, cluster %+v: want R3 with two followers", stream, ci.Config.Replicas, ci.Cluster)
		}
		l, err := c.StreamLeader(ctx, stream)
		if err != nil {
			t.Fatal(err)
		}
		if c.Name(l) != ci.Cluster.Leader {
			t.Fatalf("StreamLeader(%s) = %s, the client API says %s", stream, c.Name(l), ci.Cluster.Leader)
		}
	}
	if l, err := c.KVLeader(ctx, "claims"); err != nil {
		t.Fatal(err)
	} else {
		t.Logf("ORDERS on %v, claims led by %s", s.CachedInfo().Cluster.Leader, c.Name(l))
	}
}
