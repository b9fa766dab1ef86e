package clusterrec

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"ticketrelay/request"
)

// Deliveries is the forwarder's store in a multi-host installation: every
// host's forwarder can deliver every host's ticket (the record holds it),
// and a delivery outcome written by one is seen by all, so that no host
// delivers a settled request again. Each write is a compare-and-set on the
// record; a copy of this host's ledger row, where it holds one, follows
// (ledger.MirrorDelivery) for the host's own views.
type Deliveries struct {
	store *Store
	local Mirror
	now   func() time.Time
}

// NewDeliveries returns the forwarder's store on s, mirroring into l.
func NewDeliveries(s *Store, l Mirror, now func() time.Time) *Deliveries {
	return &Deliveries{store: s, local: l, now: now}
}

// PriorDelivery reads the ticket and delivery record of the request whose
// scoped id is scoped, from the record. The ticket is the one the ledger
// of the accepting host gives its forwarder (named by its scoped id), so
// every host sends the downstream the same item.
func (d *Deliveries) PriorDelivery(ctx context.Context, scoped string) (request.Prior, error) {
	rec, _, found, err := d.store.Get(ctx, scoped)
	p := request.Prior{Delivery: request.Delivery{RequestID: scoped}}
	if err != nil || !found {
		return p, err
	}
	p.Accepted = true
	p.Ticket = rec.Ticket
	p.Ticket.RequestID, p.Ticket.Subject = scoped, ""
	if rec.Delivery != nil {
		p.Found = true
		p.Delivery = *rec.Delivery.Ledger(scoped)
		p.Delivery.Version = rec.Delivery.Version
	}
	if on := rec.Ticket.On; on != "" {
		// A comment or an update waits for its ticket's create, which any
		// host may have delivered: its record says.
		c, _, found, err := d.store.Get(ctx, on)
		if err != nil {
			return p, err
		}
		if p.OnAccepted = found; found && c.Delivery != nil {
			p.OnDelivery = *c.Delivery.Ledger(on)
		}
		if err := d.order(ctx, &p, rec); err != nil { // updates.go
			return p, err
		}
	}
	return p, nil
}

// RecordDelivery writes rec's delivery record if it is still at
// rec.Version, as ledger.RecordDelivery does (request.ErrStale otherwise;
// a delivery replaces any record not delivered already, whatever its
// version).
func (d *Deliveries) RecordDelivery(ctx context.Context, rec request.Delivery) error {
	key := Key(rec.RequestID)
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			select {
			case <-ctx.Done():
				return fmt.Errorf("clusterrec: record delivery %s: %w", rec.RequestID, errors.Join(ErrUnavailable, ctx.Err()))
			case <-time.After(pace.Delay(attempt)):
			}
		}
		cur, rev, found, err := d.store.get(ctx, key)
		switch {
		case err != nil:
			continue
		case !found:
			return fmt.Errorf("clusterrec: record delivery %s: %w", rec.RequestID, request.ErrNotFound)
		}
		var version int64
		if cur.Delivery != nil {
			version = cur.Delivery.Version
		}
		delivered := string(request.StatusDelivered)
		curDelivered := cur.Delivery != nil && cur.Delivery.State == delivered
		if version != rec.Version && (rec.State != delivered || curDelivered) {
			return fmt.Errorf("clusterrec: record delivery %s: %w", rec.RequestID, request.ErrStale)
		}
		cur.Delivery = &Delivery{Target: rec.Target, State: rec.State, Attempts: rec.Attempts, Throttled: rec.Throttled,
			NextAttemptAt: rec.NextAttemptAt, LastError: rec.LastError, Failure: rec.Failure, ExternalID: rec.ExternalID, ExternalURL: rec.ExternalURL,
			UpdatedAt: d.now().UTC(), By: d.store.Host(), Version: version + 1, Call: callOf(rec)}
		switch _, err := d.store.update(ctx, key, cur, rev); {
		case err == nil:
			d.unparkAfter(ctx, rec.RequestID, cur) // waiting.go
			m := *cur.Delivery.Ledger(rec.RequestID)
			m.Attempt = rec.Attempt // the history is kept by the host that called
			if err := d.local.MirrorDelivery(ctx, m); err != nil {
				d.store.log.Warn("delivery recorded in the cluster, not in this host's ledger", "request_id", rec.RequestID, "err", err)
			}
			return nil
		case errors.Is(err, errConflict):
			attempt = -1 // another write came first: read it and decide again
		case errors.Is(err, ErrFull):
			return fmt.Errorf("clusterrec: record delivery %s: %w", rec.RequestID, err)
		}
	}
}

// RecordDeliveryThen is RecordDelivery without the wait: then hears its
// answer. Once called, the write goes on if ctx ends, as the ledger's
// does, within a bound.
func (d *Deliveries) RecordDeliveryThen(ctx context.Context, rec request.Delivery, then func(error)) error {
	go func() {
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		then(d.RecordDelivery(wctx, rec))
	}()
	return nil
}

// Call is a downstream call as the delivery record write that ends it
// carries it (request.Delivery.Attempt), so that every host's console
// shows another host's calls as it shows its own (decision 0146). Only
// what the record does not already hold: the attempt count, the state
// it led to and the host are the record's Attempts, State and By. Short
// keys and integers: it is written with every attempt.
type Call struct {
	At      int64  `json:"t"`           // unix nanoseconds when the call started
	Latency int64  `json:"ns"`          // nanoseconds it took
	Status  int    `json:"s,omitempty"` // the HTTP status; 0: no HTTP answer
	Class   string `json:"c,omitempty"` // the downstream error's class; "" once delivered
	// Error is the call's error where the record's LastError says
	// something else (the attempt limit reached, a refusal's reason).
	Error string `json:"e,omitempty"`
}

// callOf is the call rec ends; nil if none.
func callOf(rec request.Delivery) *Call {
	a := rec.Attempt
	if a == nil {
		return nil
	}
	c := &Call{At: a.At.UnixNano(), Latency: int64(a.Latency), Status: a.HTTPStatus, Class: a.Class}
	if a.Error != rec.LastError {
		c.Error = a.Error
	}
	return c
}

// Attempt is the call c as the attempts history keeps it, with what d,
// the record write that carries it, says of it.
func (c *Call) Attempt(d *Delivery) *request.Attempt {
	return &request.Attempt{At: time.Unix(0, c.At).UTC(), Attempt: d.Attempts, Outcome: d.State, HTTPStatus: c.Status,
		Class: c.Class, Error: cmp.Or(c.Error, d.LastError), Latency: time.Duration(c.Latency), Host: d.By}
}
