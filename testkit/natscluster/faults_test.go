package natscluster_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"ticketrelay/testkit/natscluster"
	"ticketrelay/testkit/testwait"
)

// TestStreamLeaderKilled: SIGKILL the leader of an R3 stream; a new leader
// is elected among the other two, a publish and a KV write succeed, and
// every message acknowledged before the kill is still there, also on the
// killed node once it is back.
func TestStreamLeaderKilled(t *testing.T) {
	t.Parallel()
	c := natscluster.StartTest(t, natscluster.Config{})
	js := connect(t, c.ClientURLs())
	s, kv := setup(t, js)
	acked := publishN(t, js, 0, 50)
	ctx, cancel := context.WithTimeout(context.Background(), 3*electionTimeout)
	defer cancel()
	if _, err := kv.Create(ctx, "before", []byte("kill")); err != nil {
		t.Fatal(err)
	}

	leader, err := c.StreamLeader(ctx, "ORDERS")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Kill(leader); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	gap, attempts := retryUntil(t, electionTimeout, "a publish after the leader's SIGKILL", func(ctx context.Context) error {
		ack, err := js.Publish(ctx, "orders.new", []byte("after-kill"), jetstream.WithMsgID("after-kill"))
		if err == nil {
			acked[ack.Sequence] = "after-kill"
		}
		return err
	})
	t.Logf("SIGKILL of ORDERS leader %s: first publish acknowledged %s later (%d attempts)", c.Name(leader), gap.Round(time.Millisecond), attempts)
	retryUntil(t, electionTimeout, "a KV write after the SIGKILL", func(ctx context.Context) error {
		_, err := kv.Put(ctx, "after", []byte("kill")) // Put: a timed-out attempt may have been stored
		return err
	})
	t.Logf("first KV write acknowledged %s after the kill", time.Since(killed).Round(time.Millisecond))

	newLeader, err := c.StreamLeader(ctx, "ORDERS")
	if err != nil {
		t.Fatal(err)
	}
	if newLeader == leader {
		t.Fatalf("the killed node %s is still the leader", c.Name(leader))
	}
	checkAcked(t, s, acked)
	for key, want := range map[string]string{"before": "kill", "after": "kill"} {
		e, err := kv.Get(ctx, key)
		if err != nil || string(e.Value()) != want {
			t.Fatalf("kv %s = %v, %v; want %q", key, e, err, want)
		}
	}

	// Back on the same ports and store, it catches up as a follower.
	if err := c.Restart(ctx, leader); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	waitCaughtUp(t, c, leader, "ORDERS", uint64(len(acked)))
}

// TestKVLeaderStopped: SIGSTOP the leader of an R3 bucket; writes resume
// once the other two have elected a leader (the gap is logged, not
// asserted), and after SIGCONT the old leader steps down and catches up.
func TestKVLeaderStopped(t *testing.T) {
	if testing.Short() {
		t.Skip("an election and a recovery: slow")
	}
	t.Parallel()
	c := natscluster.StartTest(t, natscluster.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 3*electionTimeout)
	defer cancel()
	_, setupKV := setup(t, connect(t, c.ClientURLs()))
	for k := range 20 {
		if _, err := setupKV.Create(ctx, fmt.Sprintf("k%d", k), []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	leader, err := c.KVLeader(ctx, "claims")
	if err != nil {
		t.Fatal(err)
	}
	// The writer talks to a node that keeps running: this test is about the
	// cluster, not about a client noticing a hung server.
	js := connect(t, c.URL(other(c, leader)), nats.IgnoreDiscoveredServers())
	kv, err := js.KeyValue(ctx, "claims")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("stopping the claims leader %s", c.Name(leader))
	if err := c.Stop(leader); err != nil {
		t.Fatal(err)
	}
	gap, attempts := retryUntil(t, electionTimeout, "a KV write while the leader is stopped", func(ctx context.Context) error {
		// Put, not Create: an attempt that timed out may have been stored
		// after all, and a Create would then fail for ever.
		_, err := kv.Put(ctx, "during-stop", []byte("v"))
		return err
	})
	t.Logf("SIGSTOP of claims leader %s: first KV write acknowledged %s later (%d attempts)", c.Name(leader), gap.Round(time.Millisecond), attempts)
	newLeader, err := c.KVLeader(ctx, "claims")
	if err != nil {
		t.Fatal(err)
	}
	if newLeader == leader {
		t.Fatalf("the stopped node %s is still named leader", c.Name(leader))
	}

	if err := c.Cont(leader); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	if l, err := c.KVLeader(ctx, "claims"); err != nil {
		t.Fatal(err)
	} else {
		t.Logf("after SIGCONT the claims leader is %s", c.Name(l))
	}
	waitCaughtUp(t, c, leader, "KV_claims", 21)
	e, err := kv.Get(ctx, "during-stop")
	if err != nil || string(e.Value()) != "v" {
		t.Fatalf("during-stop = %v, %v", e, err)
	}
}

// TestPartitionedFollower: cut the routes of a node that leads neither the
// stream nor the meta layer; the other two keep accepting writes, a write
// through the cut node's own client connection does not succeed, and after
// Heal the node catches up.
func TestPartitionedFollower(t *testing.T) {
	if testing.Short() {
		t.Skip("a partition and a recovery: slow")
	}
	t.Parallel()
	c := natscluster.StartTest(t, natscluster.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 3*electionTimeout)
	defer cancel()
	setup(t, connect(t, c.ClientURLs()))
	leader, err := c.StreamLeader(ctx, "ORDERS")
	if err != nil {
		t.Fatal(err)
	}
	meta, err := c.MetaLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cut := other(c, leader, meta)
	majority := connect(t, c.URL(leader), nats.IgnoreDiscoveredServers())
	minority := connect(t, c.URL(cut), nats.IgnoreDiscoveredServers())
	acked := publishN(t, majority, 0, 10)
	waitCaughtUp(t, c, cut, "ORDERS", 10)

	if err := c.Partition(cut); err != nil {
		t.Fatal(err)
	}
	// Every route of the cut node is gone, and so is every route to it:
	// none went past the proxies.
	for _, i := range []int{cut, leader, meta} {
		waitPeers(t, c, i, func(peers []string) bool {
			return i == cut && len(peers) == 0 || i != cut && !slices.Contains(peers, c.Name(cut))
		})
	}
	for k, v := range publishN(t, majority, 10, 10) {
		acked[k] = v
	}
	wctx, wcancel := context.WithTimeout(ctx, 3*time.Second)
	_, err = minority.Publish(wctx, "orders.new", []byte("through the cut node"))
	wcancel()
	if err == nil {
		t.Fatal("a publish through the partitioned node was acknowledged")
	}
	t.Logf("publish through the partitioned node %s: %v", c.Name(cut), err)
	if !isTimeoutOrNoResponders(err) {
		t.Errorf("publish through the partitioned node: %v, want a timeout or no responders", err)
	}
	st, err := c.Stream(ctx, cut, "ORDERS")
	if err != nil {
		t.Fatal(err)
	}
	if st.Msgs != 10 {
		t.Fatalf("the partitioned node holds %d messages, want the 10 from before the cut", st.Msgs)
	}

	if err := c.Heal(cut); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	waitCaughtUp(t, c, cut, "ORDERS", uint64(len(acked)))
	retryUntil(t, electionTimeout, "a publish through the healed node", func(ctx context.Context) error {
		_, err := minority.Publish(ctx, "orders.new", []byte("after heal"))
		return err
	})
}

// TestWipedNodeRejoins: a node whose store is lost for good comes back
// empty on the same name and ports, rejoins, and the stream is R3 again
// with every message on it.
func TestWipedNodeRejoins(t *testing.T) {
	if testing.Short() {
		t.Skip("a full catch-up: slow")
	}
	t.Parallel()
	c := natscluster.StartTest(t, natscluster.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 3*electionTimeout)
	defer cancel()
	js := connect(t, c.ClientURLs())
	s, _ := setup(t, js)
	acked := publishN(t, js, 0, 30)
	leader, err := c.StreamLeader(ctx, "ORDERS")
	if err != nil {
		t.Fatal(err)
	}
	lost := other(c, leader)
	if err := c.Kill(lost); err != nil {
		t.Fatal(err)
	}
	if err := c.Wipe(lost); err != nil {
		t.Fatal(err)
	}
	for k, v := range publishN(t, js, 30, 20) {
		acked[k] = v
	}
	if err := c.Restart(ctx, lost); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	waitCaughtUp(t, c, lost, "ORDERS", uint64(len(acked)))
	l, err := c.StreamLeader(ctx, "ORDERS")
	if err != nil {
		t.Fatal(err)
	}
	st, err := c.Stream(ctx, l, "ORDERS")
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Replicas) != 2 || !slices.ContainsFunc(st.Replicas, func(r natscluster.Replica) bool { return r.Name == c.Name(lost) && r.Current }) {
		t.Fatalf("after the rejoin the leader %s sees replicas %+v, want two current ones including %s", c.Name(l), st.Replicas, c.Name(lost))
	}
	checkAcked(t, s, acked)
}

// waitPeers waits until node i's routes satisfy ok.
func waitPeers(t *testing.T, c *natscluster.Cluster, i int, ok func([]string) bool) {
	t.Helper()
	var peers []string
	var err error
	if !testwait.Until(30*time.Second, func() bool {
		peers, err = c.Peers(context.Background(), i)
		return err == nil && ok(peers)
	}) {
		t.Fatalf("%s's routes: %v (err %v)", c.Name(i), peers, err)
	}
}
