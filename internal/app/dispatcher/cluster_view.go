package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"ticketrelay/clusterrec"
	"ticketrelay/installation"
	"ticketrelay/internal/maintenance"
	"ticketrelay/metrics"
)

// clusterView is one look at a multi-host installation's share of the NATS
// cluster: its stream, its request bucket and its hosts' heartbeats. The
// dispatcher exports it as metrics every few seconds; `dispatcher status`
// prints it.
type clusterView struct {
	Installation string        `json:"installation"`
	Stream       *resourceView `json:"stream"` // nil: no answer
	Bucket       *resourceView `json:"bucket"`
	Hosts        []hostView    `json:"hosts"` // nil: no answer
	// Errors is every question that got no answer; empty when the view
	// is whole.
	Errors []string `json:"errors"`
}

// resourceView is a replicated stream (the bucket is one too) as its
// leader reports it.
type resourceView struct {
	Name     string     `json:"name"`
	Replicas int        `json:"replicas"` // configured
	Leader   string     `json:"leader"`   // server name; "" while it has none
	Peers    []peerView `json:"peers"`    // the leader first
	Messages uint64     `json:"messages"`
	Bytes    uint64     `json:"bytes"`
	MaxBytes int64      `json:"max_bytes"` // -1: none
}

type peerView struct {
	Name          string  `json:"name"`
	Leader        bool    `json:"leader"`
	Current       bool    `json:"current"`
	Offline       bool    `json:"offline"`
	Lag           uint64  `json:"lag"`
	ActiveSeconds float64 `json:"active_seconds"` // since the leader last heard from it
}

type hostView struct {
	Host     string `json:"host"`
	Hostname string `json:"hostname"`
	State    string `json:"state"` // clusterrec.HostStates
	// The entry's server time: the host's last beat while it is live or
	// silent, the moment another host marked it once adopting or adopted.
	LastEntry           time.Time `json:"last_entry"`
	LastEntryAgeSeconds float64   `json:"last_entry_age_seconds"`
	AdoptedBy           string    `json:"adopted_by,omitempty"`
	// Finished: adopted, and nothing it wrote is left to adopt; a host
	// removed for good can now be forgotten (`dispatcher forget-host`).
	Finished bool `json:"finished,omitempty"`
}

// lookAtCluster asks for the stream, the bucket and the heartbeats; what
// does not answer is left out and named in Errors. store may be nil (the
// bucket could not be bound): then only the stream is looked at.
func lookAtCluster(ctx context.Context, js jetstream.JetStream, store *clusterrec.Store, inst installation.Name,
	deadAfter time.Duration, now time.Time) clusterView {
	v := clusterView{Installation: string(inst), Errors: []string{}}
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	st, err := js.Stream(sctx, inst.Stream())
	cancel()
	if err != nil {
		v.Errors = append(v.Errors, fmt.Sprintf("stream %s: %v", inst.Stream(), err))
	} else {
		v.Stream = resource(st.CachedInfo())
	}
	if store == nil {
		return v
	}
	if info, err := store.BucketInfo(ctx); err != nil {
		v.Errors = append(v.Errors, err.Error())
	} else {
		v.Bucket = resource(info)
	}
	hosts, err := store.HostsSeen(ctx)
	if err != nil {
		v.Errors = append(v.Errors, err.Error())
		return v
	}
	v.Hosts = []hostView{}
	for _, h := range hosts {
		v.Hosts = append(v.Hosts, hostView{Host: h.Host, Hostname: h.Hostname, State: h.State(now, deadAfter),
			LastEntry: h.LastBeat, LastEntryAgeSeconds: max(0, now.Sub(h.LastBeat).Seconds()), AdoptedBy: h.By,
			Finished: h.Finished()})
	}
	return v
}

func resource(info *jetstream.StreamInfo) *resourceView {
	r := &resourceView{Name: info.Config.Name, Replicas: max(1, info.Config.Replicas), Messages: info.State.Msgs,
		Bytes: info.State.Bytes, MaxBytes: info.Config.MaxBytes}
	c := info.Cluster
	if c == nil {
		// A server outside any cluster answers for itself.
		r.Peers = []peerView{{Leader: true, Current: true}}
		r.Leader = "(single server)"
		return r
	}
	r.Leader = c.Leader
	if c.Leader != "" {
		r.Peers = append(r.Peers, peerView{Name: c.Leader, Leader: true, Current: true})
	}
	for _, p := range c.Replicas {
		if p == nil {
			continue
		}
		r.Peers = append(r.Peers, peerView{Name: p.Name, Current: p.Current, Offline: p.Offline, Lag: p.Lag, ActiveSeconds: p.Active.Seconds()})
	}
	return r
}

// metricsState is the view as metrics.Cluster exports it.
func (v clusterView) metricsState() metrics.ClusterState {
	s := metrics.ClusterState{Installation: v.Installation, Available: len(v.Errors) == 0, Replication: map[string]metrics.Replication{}}
	for name, r := range map[string]*resourceView{"stream": v.Stream, "bucket": v.Bucket} {
		if r == nil {
			continue
		}
		var rep metrics.Replication
		rep.LeaderKnown = r.Leader != ""
		for _, p := range r.Peers {
			switch {
			case p.Offline:
				rep.Offline++
			case p.Current:
				rep.Current++
			default:
				rep.Lagging++
			}
			rep.Lag = max(rep.Lag, p.Lag)
		}
		s.Replication[name] = rep
	}
	if v.Bucket != nil {
		s.HaveBucket, s.BucketBytes, s.BucketMaxBytes = true, v.Bucket.Bytes, v.Bucket.MaxBytes
	}
	if v.Hosts != nil {
		s.Hosts = map[string]int{}
		for _, h := range v.Hosts {
			s.Hosts[h.State]++
			s.HostList = append(s.HostList, metrics.ClusterHost{Host: h.Host, Hostname: h.Hostname, Lost: h.State != clusterrec.HostLive})
		}
	}
	return s
}

// clusterWatch exports the view every `every` until ctx ends.
type clusterWatch struct {
	js        jetstream.JetStream
	store     *clusterrec.Store
	inst      installation.Name
	deadAfter time.Duration
	every     time.Duration
	m         *metrics.Cluster
	log       *slog.Logger
	now       func() time.Time
	lastErrs  int // questions the last look left unanswered
}

// Run looks at once, then every `every`, until ctx ends.
func (w *clusterWatch) Run(ctx context.Context) error {
	return maintenance.Loop{Interval: w.every, Eager: true, RunOnce: w.look, Log: w.log}.Run(ctx)
}

// look exports the view once. It says when the view breaks and when it
// mends, not every round, so it returns no error for the Loop to log.
func (w *clusterWatch) look(ctx context.Context) error {
	v := lookAtCluster(ctx, w.js, w.store, w.inst, w.deadAfter, w.now())
	if ctx.Err() != nil {
		return nil
	}
	w.m.Set(v.metricsState())
	if n := len(v.Errors); (n > 0) != (w.lastErrs > 0) {
		if n > 0 {
			w.log.Warn("cluster: the request bucket or the stream does not answer", "err", errors.New(v.Errors[0]), "questions_unanswered", n)
		} else {
			w.log.Info("cluster: the request bucket and the stream answer again")
		}
		w.lastErrs = n
	}
	return nil
}

// clusterWatchEvery is how often the dispatcher looks at the cluster for
// its metrics: a few times per -host-dead-after, so a lost host shows
// soon after the others start adopting it, and at most every 10 s (a
// scrape interval) since each look costs a few requests to the leaders.
func clusterWatchEvery(deadAfter time.Duration) time.Duration {
	return min(10*time.Second, max(time.Second, deadAfter/3))
}
