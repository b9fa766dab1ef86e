// Package operate is what the operator's tools share: the dispatcher's
// commands (status, redrive, resolve, forget-host) and the console call
// the same functions, so an action follows the same rules wherever it is
// taken, and is recorded with who took it.
package operate

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"ticketrelay/installation"
	"ticketrelay/metrics"
	"ticketrelay/store/clusterrec"
)

// ClusterView is one look at a multi-host installation's share of the NATS
// cluster: its stream, its request bucket and its hosts' heartbeats. The
// dispatcher exports it as metrics every few seconds; `dispatcher status`
// prints it.
type ClusterView struct {
	Installation string        `json:"installation"`
	Stream       *ResourceView `json:"stream"` // nil: no answer
	Bucket       *ResourceView `json:"bucket"`
	Hosts        []HostView    `json:"hosts"` // nil: no answer
	// Errors is every question that got no answer; empty when the view
	// is whole.
	Errors []string `json:"errors"`
}

// ResourceView is a replicated stream (the bucket is one too) as its
// leader reports it.
type ResourceView struct {
	Name     string     `json:"name"`
	Replicas int        `json:"replicas"` // configured
	Leader   string     `json:"leader"`   // server name; "" while it has none
	Peers    []PeerView `json:"peers"`    // the leader first
	Messages uint64     `json:"messages"`
	Bytes    uint64     `json:"bytes"`
	MaxBytes int64      `json:"max_bytes"` // -1: none
}

type PeerView struct {
	Name          string  `json:"name"`
	Leader        bool    `json:"leader"`
	Current       bool    `json:"current"`
	Offline       bool    `json:"offline"`
	Lag           uint64  `json:"lag"`
	ActiveSeconds float64 `json:"active_seconds"` // since the leader last heard from it
}

type HostView struct {
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

// LookAtCluster asks for the stream, the bucket and the heartbeats; what
// does not answer is left out and named in Errors. store may be nil (the
// bucket could not be bound): then only the stream is looked at.
func LookAtCluster(ctx context.Context, js jetstream.JetStream, store *clusterrec.Store, inst installation.Name,
	deadAfter time.Duration, now time.Time) ClusterView {
	v := ClusterView{Installation: string(inst), Errors: []string{}}
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
	v.Hosts = []HostView{}
	for _, h := range hosts {
		v.Hosts = append(v.Hosts, HostView{Host: h.Host, Hostname: h.Hostname, State: h.State(now, deadAfter),
			LastEntry: h.LastBeat, LastEntryAgeSeconds: max(0, now.Sub(h.LastBeat).Seconds()), AdoptedBy: h.By,
			Finished: h.Finished()})
	}
	return v
}

func resource(info *jetstream.StreamInfo) *ResourceView {
	r := &ResourceView{Name: info.Config.Name, Replicas: max(1, info.Config.Replicas), Messages: info.State.Msgs,
		Bytes: info.State.Bytes, MaxBytes: info.Config.MaxBytes}
	c := info.Cluster
	if c == nil {
		// A server outside any cluster answers for itself.
		r.Peers = []PeerView{{Leader: true, Current: true}}
		r.Leader = "(single server)"
		return r
	}
	r.Leader = c.Leader
	if c.Leader != "" {
		r.Peers = append(r.Peers, PeerView{Name: c.Leader, Leader: true, Current: true})
	}
	for _, p := range c.Replicas {
		if p == nil {
			continue
		}
		r.Peers = append(r.Peers, PeerView{Name: p.Name, Current: p.Current, Offline: p.Offline, Lag: p.Lag, ActiveSeconds: p.Active.Seconds()})
	}
	return r
}

// MetricsState is the view as metrics.Cluster exports it.
func (v ClusterView) MetricsState() metrics.ClusterState {
	s := metrics.ClusterState{Installation: v.Installation, Available: len(v.Errors) == 0, Replication: map[string]metrics.Replication{}}
	for name, r := range map[string]*ResourceView{"stream": v.Stream, "bucket": v.Bucket} {
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
