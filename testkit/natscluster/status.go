package natscluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
)

// pollInterval is how often the waits below look at the monitoring
// endpoints again.
const pollInterval = 50 * time.Millisecond

// errNotYet is a condition that has not held yet; poll keeps waiting.
var errNotYet = errors.New("not yet")

// poll calls check until it returns nil or an error that is not errNotYet
// wrapped, or ctx ends; then it returns ctx's error with check's last
// answer.
func poll(ctx context.Context, what string, check func() error) error {
	t := time.NewTicker(pollInterval)
	defer t.Stop()
	for {
		err := check()
		if err == nil || !errors.Is(err, errNotYet) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("natscluster: waiting for %s: %w (last: %v)", what, ctx.Err(), err)
		case <-t.C:
		}
	}
}

func notYet(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{errNotYet}, args...)...)
}

// live is the nodes that run and are not stopped; connected is those of
// them whose routes are not cut.
func (c *Cluster) live() (live, connected []int) {
	for i := range c.nodes {
		if c.Running(i) && !c.Stopped(i) {
			live = append(live, i)
			if !c.Partitioned(i) {
				connected = append(connected, i)
			}
		}
	}
	return live, connected
}

// WaitReady waits until the cluster is whole as the harness has shaped it:
// every running node that is not stopped answers /varz; every one of them
// that is not partitioned has routes to all the others (/routez), sees the
// same JetStream meta leader among them (/jsz) and is healthy (/healthz:
// its streams and consumers are current). A partitioned node only has to
// answer.
func (c *Cluster) WaitReady(ctx context.Context) error {
	return poll(ctx, "the cluster to be ready", func() error { return c.ready(ctx) })
}

func (c *Cluster) ready(ctx context.Context) error {
	live, connected := c.live()
	if len(connected) == 0 {
		return fmt.Errorf("natscluster: no node is running and reachable")
	}
	for _, i := range live {
		var v varz
		if err := getJSON(ctx, c.hc, c.nodes[i].addrs.HTTP, "/varz", &v); err != nil {
			return notYet("%s: %v", c.Name(i), err)
		}
	}
	leader := ""
	for _, i := range connected {
		var r routez
		if err := getJSON(ctx, c.hc, c.nodes[i].addrs.HTTP, "/routez", &r); err != nil {
			return notYet("%s: %v", c.Name(i), err)
		}
		for _, j := range connected {
			if j != i && !slices.Contains(r.Routes, routeInfo{RemoteName: c.Name(j)}) {
				return notYet("%s has no route to %s", c.Name(i), c.Name(j))
			}
		}
		var j jsz
		if err := getJSON(ctx, c.hc, c.nodes[i].addrs.HTTP, "/jsz", &j); err != nil {
			return notYet("%s: %v", c.Name(i), err)
		}
		if j.Meta == nil || j.Meta.Leader == "" {
			return notYet("%s sees no meta leader", c.Name(i))
		}
		if leader != "" && j.Meta.Leader != leader {
			return notYet("%s sees meta leader %s, another node %s", c.Name(i), j.Meta.Leader, leader)
		}
		leader = j.Meta.Leader
		var h struct{}
		if err := getJSON(ctx, c.hc, c.nodes[i].addrs.HTTP, "/healthz", &h); err != nil {
			return notYet("%s: %v", c.Name(i), err)
		}
	}
	if l := c.Index(leader); !slices.Contains(connected, l) {
		return notYet("the meta leader %s is not running and reachable", leader)
	}
	return nil
}

// MetaLeader waits until the running, reachable nodes agree on a JetStream
// meta leader that is one of them, and returns its index.
func (c *Cluster) MetaLeader(ctx context.Context) (int, error) {
	leader := -1
	err := poll(ctx, "a meta leader", func() error {
		_, connected := c.live()
		name := ""
		for _, i := range connected {
			var j jsz
			if err := getJSON(ctx, c.hc, c.nodes[i].addrs.HTTP, "/jsz", &j); err != nil {
				return notYet("%s: %v", c.Name(i), err)
			}
			if j.Meta == nil || j.Meta.Leader == "" || (name != "" && j.Meta.Leader != name) {
				return notYet("%s sees meta leader %q", c.Name(i), j.Meta.Leader)
			}
			name = j.Meta.Leader
		}
		if l := c.Index(name); slices.Contains(connected, l) {
			leader = l
			return nil
		}
		return notYet("meta leader %q is not running and reachable", name)
	})
	return leader, err
}

// StreamLeader waits until stream (in any account) has a leader that is
// running and reachable, that says so itself, and that every other such
// node holding the stream names; it returns its index.
func (c *Cluster) StreamLeader(ctx context.Context, stream string) (int, error) {
	leader := -1
	err := poll(ctx, "a leader of stream "+stream, func() error {
		_, connected := c.live()
		name := ""
		for _, i := range connected {
			st, err := c.Stream(ctx, i, stream)
			if errors.Is(err, ErrNoStream) {
				continue // not a replica
			}
			if err != nil {
				return notYet("%v", err)
			}
			if st.Leader == "" || (name != "" && st.Leader != name) {
				return notYet("%s sees leader %q of %s", c.Name(i), st.Leader, stream)
			}
			name = st.Leader
		}
		if l := c.Index(name); slices.Contains(connected, l) {
			leader = l
			return nil
		}
		return notYet("leader %q of %s is not running and reachable", name, stream)
	})
	return leader, err
}

// KVLeader is StreamLeader of the stream behind KV bucket bucket.
func (c *Cluster) KVLeader(ctx context.Context, bucket string) (int, error) {
	return c.StreamLeader(ctx, "KV_"+bucket)
}

// ErrNoStream is Stream's answer for a node that holds no such stream.
var ErrNoStream = errors.New("natscluster: the node holds no such stream")

// StreamStatus is one node's view of a stream, from its /jsz.
type StreamStatus struct {
	Account  string
	Msgs     uint64
	FirstSeq uint64
	LastSeq  uint64
	Leader   string    // server name of the leader as this node sees it; "" if none
	Replicas []Replica // the other peers, as this node sees them
}

// Replica is a peer of a stream as one node sees it.
type Replica struct {
	Name    string
	Current bool
	Offline bool
}

// Stream is node i's view of stream (the first account holding it).
func (c *Cluster) Stream(ctx context.Context, i int, stream string) (StreamStatus, error) {
	n, err := c.node(i)
	if err != nil {
		return StreamStatus{}, err
	}
	var j jsz
	if err := getJSON(ctx, c.hc, n.addrs.HTTP, "/jsz?accounts=true&streams=true", &j); err != nil {
		return StreamStatus{}, fmt.Errorf("%s: %w", n.addrs.Name, err)
	}
	for _, a := range j.Accounts {
		for _, s := range a.Streams {
			if s.Name != stream {
				continue
			}
			st := StreamStatus{Account: a.Name, Msgs: s.State.Msgs, FirstSeq: s.State.FirstSeq, LastSeq: s.State.LastSeq}
			if s.Cluster != nil {
				st.Leader = s.Cluster.Leader
				for _, r := range s.Cluster.Replicas {
					st.Replicas = append(st.Replicas, Replica{Name: r.Name, Current: r.Current, Offline: r.Offline})
				}
			}
			return st, nil
		}
	}
	return StreamStatus{}, fmt.Errorf("%s: %s: %w", n.addrs.Name, stream, ErrNoStream)
}

// Peers is the server names node i has routes to (/routez), one per
// peer however many pooled connections carry it.
func (c *Cluster) Peers(ctx context.Context, i int) ([]string, error) {
	n, err := c.node(i)
	if err != nil {
		return nil, err
	}
	var r routez
	if err := getJSON(ctx, c.hc, n.addrs.HTTP, "/routez", &r); err != nil {
		return nil, fmt.Errorf("%s: %w", n.addrs.Name, err)
	}
	var names []string
	for _, rt := range r.Routes {
		if !slices.Contains(names, rt.RemoteName) {
			names = append(names, rt.RemoteName)
		}
	}
	slices.Sort(names)
	return names, nil
}

// Sync is how a node fsyncs its JetStream store.
type Sync struct {
	Always   bool          // sync_interval: always: fsync before every acknowledgement
	Interval time.Duration // the background fsync interval otherwise
}

func (s Sync) String() string {
	if s.Always {
		return "always"
	}
	return s.Interval.String()
}

// SyncInterval is node i's JetStream sync_interval as its /varz reports
// it. It is a per-node setting that no client can see, so the only way to
// check a cluster fsyncs every write is to ask every node.
func (c *Cluster) SyncInterval(ctx context.Context, i int) (Sync, error) {
	n, err := c.node(i)
	if err != nil {
		return Sync{}, err
	}
	var v varz
	if err := getJSON(ctx, c.hc, n.addrs.HTTP, "/varz", &v); err != nil {
		return Sync{}, fmt.Errorf("%s: %w", n.addrs.Name, err)
	}
	if v.JetStream.Config == nil {
		return Sync{}, fmt.Errorf("natscluster: %s: /varz shows no JetStream configuration", n.addrs.Name)
	}
	return Sync{Always: v.JetStream.Config.SyncAlways, Interval: v.JetStream.Config.SyncInterval}, nil
}

// Varz is node i's server id, name and cluster name from /varz.
func (c *Cluster) Varz(ctx context.Context, i int) (id, name, cluster string, err error) {
	n, err := c.node(i)
	if err != nil {
		return "", "", "", err
	}
	var v varz
	if err := getJSON(ctx, c.hc, n.addrs.HTTP, "/varz", &v); err != nil {
		return "", "", "", fmt.Errorf("%s: %w", n.addrs.Name, err)
	}
	return v.ID, v.Name, v.Cluster.Name, nil
}
