package clusterrec

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"ticketrelay/internal/archetype"
	"ticketrelay/ledger"
)

// Heartbeat is a host's entry under "h.<host>": that it is alive, and how
// far its relay has published. Liveness is judged by the server's
// timestamps of the entries (the stream leader's clock), never by the
// hosts' own clocks.
type Heartbeat struct {
	Host     string `json:"host"`
	Hostname string `json:"hostname,omitempty"`
	// Watermark: every request this host accepted before it is in the
	// stream (its oldest unpublished outbox row's acceptance, or the
	// beat's time when none waits). What it left unpublished when lost
	// was accepted after it.
	Watermark time.Time `json:"watermark"`
	State     string    `json:"state"`                // HostLive, or HostAdopting/HostAdopted once another host took over
	By        string    `json:"adopted_by,omitempty"` // the host that adopted it
	// AdoptedUpTo: the records written before it (server time) were
	// looked at by the last adoption; the next one starts there. Quiet
	// counts the adoptions in a row that found nothing new.
	AdoptedUpTo time.Time `json:"adopted_up_to,omitzero"`
	Quiet       int       `json:"quiet,omitempty"`
}

// quietRounds is how many adoptions in a row must find nothing before a
// lost host's records stop being looked at: its mcp-front may accept for a
// while after its dispatcher was lost (it refuses once it sees itself
// adopted, see Front).
const quietRounds = 12

// Host states.
const (
	HostLive     = "live"
	HostAdopting = "adopting"
	HostAdopted  = "adopted"
)

// Pending is the part of the local ledger the heartbeat reads: the
// acceptance time of the oldest request not yet handed to the stream.
type Pending func(ctx context.Context) (oldest time.Time, ok bool, err error)

// HostsConfig tunes Hosts. Zero fields take the defaults.
type HostsConfig struct {
	// Every is how often this host beats and looks at the others.
	// Default 5s.
	Every time.Duration
	// DeadAfter is how long without a beat makes a host lost: the other
	// hosts then publish and deliver what it left. Default 30s.
	DeadAfter time.Duration
	// Slack is how far before a lost host's watermark its requests are
	// looked for. Default 1m.
	Slack time.Duration
}

// WithDefaults fills zero fields.
func (c HostsConfig) WithDefaults() HostsConfig {
	c.Every = cmp.Or(c.Every, 5*time.Second)
	c.DeadAfter = cmp.Or(c.DeadAfter, 30*time.Second)
	c.Slack = cmp.Or(c.Slack, time.Minute)
	return c
}

// Hosts keeps this host's heartbeat and adopts what a lost host left
// behind: the requests it accepted (claimed, with the whole ticket, in the
// record) that were not yet in the stream when it was lost, and that no
// forwarder has settled. The adopting host commits them to its own ledger
// under their own names; its relay publishes them (Nats-Msg-Id drops a
// copy the lost host had published after all) and the record keeps the
// delivery to one.
type Hosts struct {
	cfg     HostsConfig
	store   *Store
	local   Committer
	pending Pending
	log     *slog.Logger
	now     func() time.Time
	seen    map[string]bool // hosts this process has seen alive, for the log
}

// NewHosts builds the heartbeat and adoption service of s's host.
func NewHosts(arch archetype.Archetype, cfg HostsConfig, s *Store, l Committer, pending Pending) *Hosts {
	arch = arch.WithDefaults()
	return &Hosts{cfg: cfg.WithDefaults(), store: s, local: l, pending: pending, log: arch.Logger, now: arch.Now, seen: map[string]bool{}}
}

// Run beats and watches until ctx ends.
func (h *Hosts) Run(ctx context.Context) error {
	t := time.NewTicker(h.cfg.Every)
	defer t.Stop()
	for {
		if err := h.RunOnce(ctx); err != nil && ctx.Err() == nil {
			h.log.Warn("hosts: round failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// RunOnce beats once and adopts what each lost host left.
func (h *Hosts) RunOnce(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, max(h.cfg.Every, 30*time.Second))
	defer cancel()
	now, err := h.beat(ctx)
	if err != nil {
		return err
	}
	lister, err := h.store.kv.ListKeysFiltered(ctx, hostPrefix+">")
	if err != nil {
		if errors.Is(err, jetstream.ErrNoKeysFound) {
			return nil
		}
		return fmt.Errorf("hosts: list: %w", err)
	}
	var keys []string
	for k := range lister.Keys() {
		keys = append(keys, k)
	}
	var errs []error
	for _, k := range keys {
		if k == hostPrefix+h.store.Host() {
			continue
		}
		e, err := h.store.kv.Get(ctx, k)
		if err != nil {
			continue // expired or deleted meanwhile
		}
		var hb Heartbeat
		if err := json.Unmarshal(e.Value(), &hb); err != nil {
			errs = append(errs, fmt.Errorf("hosts: %s: %w", k, err))
			continue
		}
		silent := now.Sub(e.Created())
		switch {
		case hb.State == HostAdopted && hb.Quiet >= quietRounds:
		case hb.State == HostAdopted && now.Sub(e.Created()) < h.cfg.Every:
			// Adopted this round already.
		case hb.State == HostLive && silent < h.cfg.DeadAfter:
			if !h.seen[hb.Host] {
				h.seen[hb.Host] = true
				h.log.Info("hosts: a host of the installation is alive", "host", hb.Host, "hostname", hb.Hostname)
			}
		case hb.State == HostAdopting && silent < h.cfg.DeadAfter:
			// Another host is adopting it now.
		default:
			if err := h.adopt(ctx, k, e.Revision(), hb, silent, now); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// heartbeat reads host's heartbeat.
func (s *Store) heartbeat(ctx context.Context, host string) (Heartbeat, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.OpTimeout)
	defer cancel()
	var hb Heartbeat
	e, err := s.kv.Get(ctx, hostPrefix+host)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return hb, false, nil
	}
	if err != nil {
		return hb, false, err
	}
	return hb, true, json.Unmarshal(e.Value(), &hb)
}

// beat writes this host's heartbeat and returns the server's time of it.
func (h *Hosts) beat(ctx context.Context) (time.Time, error) {
	wm, ok, err := h.pending(ctx)
	if err != nil {
		return time.Time{}, fmt.Errorf("hosts: oldest unpublished request: %w", err)
	}
	if !ok {
		wm = h.now()
	}
	name, _ := os.Hostname()
	b, _ := json.Marshal(Heartbeat{Host: h.store.Host(), Hostname: name, Watermark: wm.UTC(), State: HostLive})
	key := hostPrefix + h.store.Host()
	if _, err := h.store.kv.Put(ctx, key, b); err != nil {
		return time.Time{}, fmt.Errorf("hosts: beat: %w", err)
	}
	e, err := h.store.kv.Get(ctx, key)
	if err != nil {
		return time.Time{}, fmt.Errorf("hosts: beat: %w", err)
	}
	return e.Created(), nil
}

// adopt takes over what lost host hb left: first the right to adopt (a
// compare-and-set on its heartbeat, so one host adopts at a time), then
// every unsettled request it holds in the record that was written since
// the last adoption (the first one: since its watermark). now is the
// server's time of this round.
func (h *Hosts) adopt(ctx context.Context, key string, rev uint64, hb Heartbeat, silent time.Duration, now time.Time) error {
	from := hb.Watermark.Add(-h.cfg.Slack)
	if !hb.AdoptedUpTo.IsZero() {
		from = hb.AdoptedUpTo.Add(-h.cfg.Every)
	}
	first := hb.State != HostAdopted
	hb.State, hb.By = HostAdopting, h.store.Host()
	b, _ := json.Marshal(hb)
	if _, err := h.store.kv.Update(ctx, key, b, rev); err != nil {
		if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			return nil // it beat again, or another host took it
		}
		return fmt.Errorf("hosts: adopt %s: %w", hb.Host, err)
	}
	if first {
		h.log.Warn("hosts: a host is lost; adopting what it left", "host", hb.Host, "hostname", hb.Hostname,
			"silent", silent.Round(time.Second), "watermark", hb.Watermark)
	}
	keys, err := h.recordsSince(ctx, from, hb.Host)
	if err != nil {
		return fmt.Errorf("hosts: adopt %s: %w", hb.Host, err)
	}
	adopted := 0
	for _, k := range keys {
		ok, err := h.adoptRecord(ctx, k, hb.Host)
		if err != nil {
			return fmt.Errorf("hosts: adopt %s: %w", hb.Host, err)
		}
		if ok {
			adopted++
		}
	}
	hb.State, hb.AdoptedUpTo = HostAdopted, now
	if hb.Quiet++; adopted > 0 {
		hb.Quiet = 0
	}
	b, _ = json.Marshal(hb)
	if _, err := h.store.kv.Put(ctx, key, b); err != nil {
		return fmt.Errorf("hosts: adopt %s: %w", hb.Host, err)
	}
	if first || adopted > 0 {
		h.log.Warn("hosts: adopted a lost host's unpublished requests", "host", hb.Host, "requests", adopted, "looked_at", len(keys))
	}
	return nil
}

// recordsSince lists the keys of the records written since from, whose
// host was lost (as the scan read them; adoptRecord reads them again).
func (h *Hosts) recordsSince(ctx context.Context, from time.Time, lost string) ([]string, error) {
	prefix := "$KV." + h.store.cfg.Installation.Bucket() + "."
	cons, err := h.store.js.OrderedConsumer(ctx, h.store.stream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{prefix + recordPrefix + ">"},
		DeliverPolicy:  jetstream.DeliverByStartTimePolicy,
		OptStartTime:   &from,
	})
	if err != nil {
		return nil, err
	}
	info, err := cons.Info(ctx)
	if err != nil {
		return nil, err
	}
	var keys []string
	seen := map[string]bool{}
	left := info.NumPending
	for left > 0 {
		batch, err := cons.Fetch(int(min(left, 256)), jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			return nil, err
		}
		n := 0
		for m := range batch.Messages() {
			n++
			md, err := m.Metadata()
			if err != nil {
				return nil, err
			}
			left = md.NumPending
			var rec Record
			if json.Unmarshal(m.Data(), &rec) != nil || rec.Host != lost || rec.settled() {
				continue
			}
			if k := strings.TrimPrefix(m.Subject(), prefix); !seen[k] {
				seen[k] = true
				keys = append(keys, k)
			}
		}
		if err := batch.Error(); err != nil {
			return nil, err
		}
		if n == 0 {
			break
		}
	}
	return keys, nil
}

// adoptRecord takes key's request over from host lost, if it is still
// that host's and unsettled: this host's ledger commits it first (its
// relay publishes it), then the record names this host. Killed in
// between, the record still names the lost host and the next adoption
// commits it again: the same ticket, and the stream and the record keep
// it to one delivery.
func (h *Hosts) adoptRecord(ctx context.Context, key, lost string) (bool, error) {
	rec, rev, found, err := h.store.get(ctx, key)
	if err != nil {
		return false, err
	}
	if !found || rec.Host != lost || rec.settled() {
		return false, nil
	}
	req := rec.Ticket.Request
	if _, err := h.local.CreateAt(ctx, req, rec.ArgsHash, rec.Ticket.CreatedAt); err != nil {
		return false, fmt.Errorf("commit %s: %w", req.RequestID, err)
	}
	for {
		taken := rec
		taken.Host, taken.Phase = h.store.Host(), PhaseAccepted
		switch _, err := h.store.update(ctx, key, taken, rev); {
		case err == nil:
			return true, nil
		case !errors.Is(err, errConflict):
			return false, err
		}
		// A delivery was recorded meanwhile, or another host took it.
		if rec, rev, found, err = h.store.get(ctx, key); err != nil || !found || rec.Host != lost {
			return err == nil, err
		}
	}
}

// settled reports whether the record's delivery needs nothing more.
func (r Record) settled() bool {
	return r.Delivery != nil && (ledger.Delivery{State: r.Delivery.State}).Settled()
}
