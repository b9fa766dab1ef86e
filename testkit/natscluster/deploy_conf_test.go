package natscluster_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"ticketrelay/testkit/e2eproc"
	"ticketrelay/testkit/natscluster"
)

// deployConf renders deploy/nats/cluster/n<i>.conf for the harness: only
// addresses and the store directory change (plus the route address the
// node advertises, so that its routes pass the proxies). Each rewritten
// setting must be found exactly once, so the files cannot drift from what
// this test runs.
func deployConf(a natscluster.NodeAddrs) (string, error) {
	root, err := e2eproc.ModuleRoot()
	if err != nil {
		return "", err
	}
	path := filepath.Join(root, "deploy", "nats", "cluster", a.Name+".conf")
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	text := string(b)
	proxies := slices.Insert(slices.Clone(a.Routes), a.Index, "nats-route://"+a.Advertise)
	for _, r := range []struct {
		re   string
		repl func(m []string) string
		want int
	}{
		{`(?m)^server_name: (\S+)$`, func(m []string) string { return "server_name: " + check(m[1], a.Name) }, 1},
		{`(?m)^listen: 0\.0\.0\.0:4222$`, func([]string) string { return fmt.Sprintf("listen: %q", a.Client) }, 1},
		{`(?m)^http: 127\.0\.0\.1:8222$`, func([]string) string { return fmt.Sprintf("http: %q", a.HTTP) }, 1},
		{`(?m)^  store_dir: /var/lib/nats/jetstream$`, func([]string) string { return fmt.Sprintf("  store_dir: %q", a.StoreDir) }, 1},
		{`(?m)^  name: (\S+)$`, func(m []string) string { return "  name: " + check(m[1], a.Cluster) }, 1},
		{`(?m)^  listen: 0\.0\.0\.0:6222$`, func([]string) string {
			return fmt.Sprintf("  listen: %q\n  advertise: %q", a.Route, a.Advertise)
		}, 1},
		{`nats-route://nats-(\d+):6222`, func(m []string) string {
			var k int
			fmt.Sscan(m[1], &k)
			if k < 1 || k > len(proxies) {
				return "nats-route://no-such-node-" + m[1]
			}
			return proxies[k-1]
		}, len(proxies)},
	} {
		re := regexp.MustCompile(r.re)
		if n := len(re.FindAllString(text, -1)); n != r.want {
			return "", fmt.Errorf("%s: %d matches of %s, want %d", path, n, r.re, r.want)
		}
		text = re.ReplaceAllStringFunc(text, func(s string) string { return r.repl(re.FindStringSubmatch(s)) })
	}
	if strings.Contains(text, "mismatch:") {
		return "", fmt.Errorf("%s: %s", path, text[strings.Index(text, "mismatch:"):])
	}
	return text, nil
}

// check returns got, or a marker deployConf reports if it is not want.
func check(got, want string) string {
	if got != want {
		return fmt.Sprintf("mismatch: %q, want %q", got, want)
	}
	return got
}

// TestDeployClusterConfigsRun starts deploy/nats/cluster/n1..n3.conf for
// real: the cluster forms, every node syncs always, the account's user
// (password from the environment) gets an R3 stream and bucket, and a
// client without credentials is refused.
func TestDeployClusterConfigsRun(t *testing.T) {
	t.Parallel()
	password := rand.Text()
	c := natscluster.StartTest(t, natscluster.Config{
		Render: deployConf,
		Env:    []string{"TICKETRELAY_NATS_PASSWORD=" + password},
	})
	ctx, cancel := context.WithTimeout(context.Background(), electionTimeout)
	defer cancel()
	for i := range c.Size() {
		if s, err := c.SyncInterval(ctx, i); err != nil || !s.Always {
			t.Fatalf("%s: sync %v, %v: want always", c.Name(i), s, err)
		}
	}
	if nc, err := nats.Connect(c.ClientURLs(), nats.Timeout(attemptTimeout)); err == nil {
		nc.Close()
		t.Fatal("a client without credentials was let in")
	} else if !errors.Is(err, nats.ErrAuthorization) {
		t.Logf("a client without credentials: %v", err)
	}
	js := connect(t, c.ClientURLs(), nats.UserInfo("ticketrelay", password))
	_, kv := setup(t, js)
	if _, err := kv.Create(ctx, "req-1", []byte("claim")); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Create(ctx, "req-1", []byte("claim")); !errors.Is(err, jetstream.ErrKeyExists) {
		t.Fatalf("second Create = %v, want ErrKeyExists", err)
	}
	publishN(t, js, 0, 3)
	l, err := c.StreamLeader(ctx, "ORDERS")
	if err != nil {
		t.Fatal(err)
	}
	st, err := c.Stream(ctx, l, "ORDERS")
	if err != nil {
		t.Fatal(err)
	}
	if st.Account != "TICKETRELAY" || st.Msgs != 3 || len(st.Replicas) != 2 {
		t.Fatalf("ORDERS on its leader %s: %+v, want 3 messages in account TICKETRELAY on three nodes", c.Name(l), st)
	}
}
