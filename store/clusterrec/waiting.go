package clusterrec

// Comments and updates parked in the cluster record until their ticket's
// create settles (decision 0187), as the ledger parks them on one host
// (0186): a message handed back to wait would hold a place of the target
// consumer's MaxAckPending for as long as the create fails, and enough of
// them would stall every delivery to the target.
//
// A parked request is a key of its own, "w.<create>.<request>", holding
// what its message needs to be published again; the create's record says
// that it has waiters. The forwarder acks the message once both are
// written. Whichever host writes the create's record settled publishes the
// parked messages again and deletes their keys; a host lost in between
// leaves the keys, which every host's heartbeat service sweeps (Hosts).
// Nothing depends on the host that accepted the request: its outbox row
// was published once, and the record holds the rest.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"ticketrelay/ticket"
	"ticketrelay/tracing"
)

// Parked is a parked request's entry: its message, to publish again.
type Parked struct {
	Format   int    `json:"v"`
	Request  string `json:"request"` // its scoped id
	On       string `json:"on"`      // the scoped id of the create it waits for
	Target   string `json:"target"`
	TicketID string `json:"ticket_id"`
	Kind     string `json:"kind"`
	Trace    string `json:"trace,omitempty"` // the accepting call's traceparent
}

// waitKey is the key of scoped parked on the create on; every request
// parked on on shares its prefix (waitersOf).
func waitKey(on, scoped string) string { return waitersOf(on) + keyHash(scoped) }

func waitersOf(on string) string { return waitPrefix + keyHash(on) + "." }

// Park sets scoped, a comment or an update on a ticket ticketrelay filed,
// aside until that ticket's create settles, and reports true: its message
// can be acked. It reports false, parking nothing, if the create settled
// meanwhile (the request can act now) or the request acts on no create
// the record holds. Parking twice is parking once.
//
// The parked entry is written first, then the create's record is marked
// (compare-and-set) unless it is settled: a settling write either comes
// after the mark, and reads it, or before it, and Park sees it settled.
func (d *Deliveries) Park(ctx context.Context, scoped string) (bool, error) {
	rec, _, found, err := d.store.Get(ctx, scoped)
	if err != nil || !found || rec.Ticket.On == "" {
		return false, err
	}
	t := rec.Ticket
	key := waitKey(t.On, scoped)
	p := Parked{Format: FormatVersion, Request: scoped, On: t.On, Target: t.Target, TicketID: t.ID, Kind: t.Kind, Trace: rec.Trace}
	if _, err := d.store.writeJSON(ctx, key, p, 0, true); err != nil && !errors.Is(err, errConflict) {
		return false, fmt.Errorf("clusterrec: park %s: %w", scoped, err)
	}
	onKey := Key(t.On)
	for {
		c, rev, found, err := d.store.get(ctx, onKey)
		switch {
		case err != nil:
			// The entry stays: the create's settling write, or the sweep,
			// publishes it; the message handed back may act first, and
			// the delivery record's version keeps the two copies to one.
			return false, fmt.Errorf("clusterrec: park %s: %w", scoped, err)
		case !found || c.settled():
			d.store.deleteKey(ctx, key)
			return false, nil
		case c.Waiters:
			return true, nil
		}
		c.Waiters = true
		switch _, err := d.store.update(ctx, onKey, c, rev); {
		case err == nil:
			return true, nil
		case !errors.Is(err, errConflict):
			return false, fmt.Errorf("clusterrec: park %s: %w", scoped, err)
		}
		// A delivery attempt of the create was recorded meanwhile: again.
	}
}

// unparkAfter publishes again the requests parked on the create whose
// record rec was just written, if it is settled and has waiters. A
// failure is left to the sweep: the entries stay until published.
func (d *Deliveries) unparkAfter(ctx context.Context, scoped string, rec Record) {
	if !rec.Waiters || !rec.settled() {
		return
	}
	if n, err := d.store.unpark(ctx, scoped); err != nil {
		d.store.log.Warn("the requests parked on a settled create were not all published again; the sweep will",
			"request_id", scoped, "published", n, "err", err)
	}
}

// unpark publishes again the messages of the requests parked on the
// create on, each under a message id of its own entry's revision (a sweep
// that publishes it too is dropped as a duplicate), and deletes their
// entries. It reports how many it published.
func (s *Store) unpark(ctx context.Context, on string) (int, error) {
	entries, err := s.listPrefix(ctx, waitersOf(on))
	if err != nil {
		return 0, err
	}
	n := 0
	for _, e := range entries {
		if err := s.republish(ctx, e); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// parkedEntry is one parked request's entry as the stream holds it.
type parkedEntry struct {
	key string
	rev uint64
	p   Parked
}

// republish publishes e's message again and deletes e (unless it changed
// since: then it was parked again, and is published again later).
func (s *Store) republish(ctx context.Context, e parkedEntry) error {
	data, err := json.Marshal(ticket.Ref{RequestID: e.p.Request, TicketID: e.p.TicketID, Kind: e.p.Kind})
	if err != nil {
		return err
	}
	m := nats.NewMsg(s.cfg.Installation.Subject(e.p.Target))
	m.Data = data
	m.Header.Set(jetstream.MsgIDHeader, fmt.Sprintf("%s#parked-%d", e.p.Request, e.rev))
	tracing.SetHeaders(m.Header, e.p.Trace, "")
	pctx, cancel := context.WithTimeout(ctx, s.cfg.OpTimeout)
	_, err = s.js.PublishMsg(pctx, m)
	cancel()
	if err != nil {
		return fmt.Errorf("%w: publish %s again: %w", ErrUnavailable, e.p.Request, err)
	}
	dctx, cancel := context.WithTimeout(ctx, s.cfg.OpTimeout)
	defer cancel()
	if err := s.kv.Delete(dctx, e.key, jetstream.LastRevision(e.rev)); err != nil &&
		!errors.Is(err, jetstream.ErrKeyExists) && !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return fmt.Errorf("%w: %s published again, its entry not deleted: %w", ErrUnavailable, e.p.Request, err)
	}
	return nil
}

// deleteKey deletes key, as a courtesy: a failure leaves an entry the
// sweep finds and publishes again, which the delivery record keeps to one
// delivery.
func (s *Store) deleteKey(ctx context.Context, key string) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.OpTimeout)
	defer cancel()
	if err := s.kv.Delete(ctx, key); err != nil {
		s.log.Debug("a parked entry was not deleted", "key", key, "err", err)
	}
}

// listPrefix reads, from the bucket's stream leader, the parked entries
// whose key starts with prefix: every write acknowledged before the call
// is seen, as by get.
func (s *Store) listPrefix(ctx context.Context, prefix string) ([]parkedEntry, error) {
	var out []parkedEntry
	err := s.scan(ctx, prefix, func(key string, m storedMsg) bool {
		e := parkedEntry{key: key, rev: m.Seq}
		if err := json.Unmarshal(m.Data, &e.p); err != nil {
			s.log.Warn("an unreadable parked entry is skipped", "key", e.key, "err", err)
			return true
		}
		out = append(out, e)
		return true
	})
	if err != nil {
		return out, fmt.Errorf("list %s: %w", prefix, err)
	}
	return out, nil
}

// SweepParked publishes again the requests parked on creates that are
// settled (or gone from the record) and deletes their entries: those a
// host lost, or a bucket that did not answer, left after the settling
// write. It reports how many it published.
func (s *Store) SweepParked(ctx context.Context) (int, error) {
	entries, err := s.listPrefix(ctx, waitPrefix)
	if err != nil {
		return 0, err
	}
	settled := map[string]bool{}
	n := 0
	var errs []error
	for _, e := range entries {
		done, seen := settled[e.p.On]
		if !seen {
			rec, _, found, err := s.Get(ctx, e.p.On)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			done = !found || rec.settled()
			settled[e.p.On] = done
		}
		if !done {
			continue
		}
		if err := s.republish(ctx, e); err != nil {
			errs = append(errs, err)
			continue
		}
		n++
	}
	return n, errors.Join(errs...)
}
