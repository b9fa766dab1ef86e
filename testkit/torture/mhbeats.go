package torture

import (
	"context"
	"encoding/json"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"ticketrelay/installation"
	"ticketrelay/store/clusterrec"
)

// KindHostState: a host's heartbeat entry said it was being adopted
// (Cause: adopting or adopted; Component: the harness's host name; Detail:
// the adopting host).
const KindHostState = "host-state"

// watchHeartbeats records every heartbeat entry of the installation that
// says a host is adopting or adopted, until ctx ends: the checker holds
// them against the host faults of the run. names maps ledger ids to the
// harness's host names.
func watchHeartbeats(ctx context.Context, urls string, inst installation.Name, names map[string]string, h *history) error {
	nc, err := nats.Connect(urls, nats.Name("torture-heartbeats"), nats.MaxReconnects(-1), nats.ReconnectWait(200*time.Millisecond))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	// The watcher is recreated if a node's fault ends it, from where it
	// was: an entry is never missed for long (an adopted host's entry
	// stays adopted until it beats again).
	for ctx.Err() == nil {
		kv, err := js.KeyValue(ctx, inst.Bucket())
		if err == nil {
			err = watchOnce(ctx, kv, names, h)
		}
		if err != nil {
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
	return nil
}

func watchOnce(ctx context.Context, kv jetstream.KeyValue, names map[string]string, h *history) error {
	w, err := kv.Watch(ctx, "h.>", jetstream.IgnoreDeletes())
	if err != nil {
		return err
	}
	defer w.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case e, ok := <-w.Updates():
			if !ok {
				return context.Canceled // the watcher ended: make a new one
			}
			if e == nil {
				continue // the end of the initial values
			}
			var hb clusterrec.Heartbeat
			if json.Unmarshal(e.Value(), &hb) != nil || hb.State == clusterrec.HostLive {
				continue
			}
			id := strings.TrimPrefix(e.Key(), "h.")
			name := names[id]
			if name == "" {
				name = id
			}
			by := names[hb.By]
			if by == "" {
				by = hb.By
			}
			h.add(Event{At: e.Created(), Kind: KindHostState, Component: name, Cause: hb.State, Detail: "by " + by})
		}
	}
}
