package metrics

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Cluster exports what a multi-host dispatcher last saw of its
// installation's NATS cluster (the request bucket, the stream and the
// hosts' heartbeats). A collector fills it with Set every few seconds; a
// scrape reads the last view whole, so a series never goes missing
// between two rounds. Every series carries the installation's name;
// host_lost also the host's id (a ledger id) and hostname: one per host
// of the installation within the bucket's TTL.
type Cluster struct {
	mu    sync.Mutex
	state *ClusterState

	available, leader, replicas, lag, bytes, maxBytes, hosts, hostLost *prometheus.Desc
}

// ClusterState is one look at the cluster.
type ClusterState struct {
	Installation string
	// Available: the look got every answer it asked for (stream, bucket,
	// heartbeats). False when the server is unreachable or the meta
	// leader is gone; what was answered is still exported.
	Available bool
	// Replication by resource: "stream" and "bucket". A resource whose
	// information did not come is absent.
	Replication map[string]Replication
	// Bucket size; BucketMaxBytes -1 when unbounded. Meaningful only with
	// HaveBucket.
	HaveBucket     bool
	BucketBytes    uint64
	BucketMaxBytes int64
	// Hosts by state (clusterrec.HostStates), and every host seen; nil
	// when the heartbeats could not be read.
	Hosts    map[string]int
	HostList []ClusterHost
}

// Replication is one replicated resource as its leader reports it.
type Replication struct {
	LeaderKnown bool
	// Peers by state: current (the leader, and followers caught up),
	// lagging (behind the leader), offline (not seen by the group).
	Current, Lagging, Offline int
	// Lag is the largest follower lag, in operations.
	Lag uint64
}

// ClusterHost is one host's entry; Lost when its state is not live.
type ClusterHost struct {
	Host, Hostname string
	Lost           bool
}

// NewCluster creates the multi-host collectors and registers them on reg.
func NewCluster(reg prometheus.Registerer) *Cluster {
	desc := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(namespace, "cluster", name), help, append([]string{"installation"}, labels...), nil)
	}
	c := &Cluster{
		available: desc("record_available",
			"1 when the dispatcher's last look at the NATS cluster got every answer (stream, request bucket, heartbeats), else 0: no quorum, no meta leader, or the cluster unreachable; tool calls then fail with a retryable error."),
		leader: desc("leader_known",
			"1 when the resource (stream, bucket) has a leader, else 0: it has lost its quorum and accepts no write.", "resource"),
		replicas: desc("replicas",
			"Replicas of the resource (stream, bucket) by state: current (the leader and caught-up followers), lagging, offline.", "resource", "state"),
		lag: desc("replica_lag",
			"Largest lag of a follower of the resource (stream, bucket) behind its leader, in operations.", "resource"),
		bytes: desc("bucket_bytes",
			"Size of the request bucket; new requests are refused from 90% of its limit (cluster_bucket_max_bytes)."),
		maxBytes: desc("bucket_max_bytes",
			"Size limit of the request bucket (-bucket-max-bytes); -1: none."),
		hosts: desc("hosts",
			"Hosts of the installation in the request bucket's heartbeats, by state: live, silent (no beat for -host-dead-after, not yet adopted), adopting, adopted (another host took over what it left).", "state"),
		hostLost: desc("host_lost",
			"1 for a host that has not beaten for -host-dead-after (silent, adopting or adopted), 0 for a live one; per host id and hostname.", "host", "hostname"),
	}
	reg.MustRegister(c)
	return c
}

// Set replaces the exported view.
func (c *Cluster) Set(s ClusterState) {
	c.mu.Lock()
	c.state = &s
	c.mu.Unlock()
}

// Describe implements prometheus.Collector.
func (c *Cluster) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.available, c.leader, c.replicas, c.lag, c.bytes, c.maxBytes, c.hosts, c.hostLost} {
		ch <- d
	}
}

// Collect implements prometheus.Collector: nothing before the first Set.
func (c *Cluster) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	s := c.state
	c.mu.Unlock()
	if s == nil {
		return
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, append([]string{s.Installation}, labels...)...)
	}
	bit := func(b bool) float64 {
		if b {
			return 1
		}
		return 0
	}
	gauge(c.available, bit(s.Available))
	for _, res := range []string{"stream", "bucket"} {
		r, ok := s.Replication[res]
		if !ok {
			continue
		}
		gauge(c.leader, bit(r.LeaderKnown), res)
		gauge(c.replicas, float64(r.Current), res, "current")
		gauge(c.replicas, float64(r.Lagging), res, "lagging")
		gauge(c.replicas, float64(r.Offline), res, "offline")
		gauge(c.lag, float64(r.Lag), res)
	}
	if s.HaveBucket {
		gauge(c.bytes, float64(s.BucketBytes))
		gauge(c.maxBytes, float64(s.BucketMaxBytes))
	}
	if s.Hosts != nil {
		for _, st := range []string{"live", "silent", "adopting", "adopted"} {
			gauge(c.hosts, float64(s.Hosts[st]), st)
		}
		for _, h := range s.HostList {
			gauge(c.hostLost, bit(h.Lost), h.Host, h.Hostname)
		}
	}
}
