package natscluster_test

import (
	"context"
	"net"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"ticketrelay/testkit/e2eproc"
	"ticketrelay/testkit/natscluster"
)

// TestClusterFormsAndSyncsAlways: three nodes come up, form one cluster
// with a meta leader, and every node's /varz reports sync_interval: always
// (the setting no client can see).
func TestClusterFormsAndSyncsAlways(t *testing.T) {
	c := natscluster.StartTest(t, natscluster.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if c.Size() != 3 {
		t.Fatalf("Size() = %d, want 3", c.Size())
	}
	if got := regexp.MustCompile(`^nats://127\.0\.0\.1:\d+(,nats://127\.0\.0\.1:\d+){2}$`); !got.MatchString(c.ClientURLs()) {
		t.Errorf("ClientURLs() = %q, want three loopback URLs", c.ClientURLs())
	}
	for i := range c.Size() {
		s, err := c.SyncInterval(ctx, i)
		if err != nil {
			t.Fatal(err)
		}
		if !s.Always || s.String() != "always" {
			t.Errorf("%s: sync = %+v (%s), want always", c.Name(i), s, s)
		}
		_, name, cluster, err := c.Varz(ctx, i)
		if err != nil {
			t.Fatal(err)
		}
		if name != c.Name(i) || cluster != "ticketrelay" {
			t.Errorf("node %d: /varz server_name %q cluster %q, want %q and ticketrelay", i, name, cluster, c.Name(i))
		}
		conf, err := os.ReadFile(c.ConfigFile(i))
		if err != nil {
			t.Fatal(err)
		}
		if !regexp.MustCompile(`(?m)^\s*sync_interval: always$`).Match(conf) {
			t.Errorf("%s does not say sync_interval: always:\n%s", c.ConfigFile(i), conf)
		}
	}
	l, err := c.MetaLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("meta leader %s", c.Name(l))
}

// TestNKeyAccount: with NKeyAuth the nodes admit only the nkey's holder,
// whose account gets replicated JetStream.
func TestNKeyAccount(t *testing.T) {
	t.Parallel()
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, err := kp.PublicKey()
	if err != nil {
		t.Fatal(err)
	}
	c := natscluster.StartTest(t, natscluster.Config{Extra: natscluster.NKeyAuth("TR", pub)})
	if nc, err := nats.Connect(c.URL(0), nats.Timeout(attemptTimeout)); err == nil {
		nc.Close()
		t.Fatal("a client without the nkey was let in")
	}
	js := connect(t, c.ClientURLs(), nats.Nkey(pub, kp.Sign))
	_, kv := setup(t, js)
	ctx, cancel := context.WithTimeout(context.Background(), electionTimeout)
	defer cancel()
	if _, err := kv.Create(ctx, "req-1", []byte("claim")); err != nil {
		t.Fatal(err)
	}
	l, err := c.KVLeader(ctx, "claims")
	if err != nil {
		t.Fatal(err)
	}
	st, err := c.Stream(ctx, l, "KV_claims")
	if err != nil {
		t.Fatal(err)
	}
	if st.Account != "TR" || st.Msgs != 1 {
		t.Fatalf("KV_claims on its leader: %+v, want one message in account TR", st)
	}
}

// TestStartRetriesATakenPort: a port picked free and taken by another
// process before its node binds it fails that start; Start makes the
// cluster again on other ports.
func TestStartRetriesATakenPort(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	picks := 0
	restore := natscluster.SetFreeAddr(func() (string, error) {
		if picks++; picks == 1 {
			return taken.Addr().String(), nil // the first node's client port
		}
		return e2eproc.FreeAddr()
	})
	defer restore()
	c := natscluster.StartTest(t, natscluster.Config{})
	if picks <= 3*3 {
		t.Fatalf("%d addresses picked: the cluster did not start again after the taken port", picks)
	}
	if strings.Contains(c.ClientURLs(), taken.Addr().String()) {
		t.Fatalf("ClientURLs() = %s still has the taken %s", c.ClientURLs(), taken.Addr())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.MetaLeader(ctx); err != nil {
		t.Fatal(err)
	}
}
