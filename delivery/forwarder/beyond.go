package forwarder

// Comments and updates (ticket.Action) go the create's way through the
// attempt: the record before an unkeyed call, the lookup of an unknown
// outcome, the classes of errors. What differs is here: the call made,
// the lookup, the capabilities they have, and the wait for the ticket's
// create.

import (
	"context"
	"encoding/json"
	"fmt"

	"ticketrelay/delivery/downstream"
	"ticketrelay/request"
	"ticketrelay/ticket"
)

// action is what an attempt of a comment or an update acts on.
type action struct {
	kind string
	ref  string // the ticket as the adapter reads it (downstream.TicketParser)
	body string
	set  downstream.Update
	at   request.Prior
}

// onTicket prepares an attempt of a comment or an update, and reports
// done when the message must not reach the downstream now. A request on a
// ticket ticketrelay filed waits for that create's delivery, and then acts
// on the external id it recorded: until the create is delivered the
// request is set aside (wait), unrecorded and uncounted. An update of a
// delivered ticket is handed back while the ticket's updates accepted
// before it are unsettled. A create that
// ended without a ticket (failed, uncertain, gone) leaves nothing to act on.
func (a *attempt) onTicket(ctx context.Context, pr request.Prior) (done bool, err error) {
	t := pr.Ticket
	if t.Kind == ticket.KindCreate {
		return false, nil
	}
	act := &action{kind: t.Kind, ref: t.Ref, body: t.Body, at: pr}
	rec := pr.Delivery
	rec.Target, rec.Attempts = a.t.Name(), max(rec.Attempts, 1)
	if t.Kind == ticket.KindUpdate {
		if err := json.Unmarshal(t.Set, &act.set); err != nil {
			rec.LastError, rec.Failure = fmt.Sprintf("the update's fields cannot be read: %v", err), request.FailurePermanent
			return true, a.dead(ctx, rec, "permanent")
		}
	}
	if missing := a.cannot(t.Kind); missing != "" {
		rec.LastError, rec.Failure = missing, request.FailurePermanent
		return true, a.dead(ctx, rec, "permanent")
	}
	if t.On != "" {
		c := pr.OnDelivery
		why := ""
		switch {
		case !pr.OnAccepted:
			why = "the ticket's create is no longer in the ledger (pruned after -retention): name the ticket by the downstream's own key or URL"
		case c.State == string(request.StatusDelivered) && pr.EarlierUpdate:
			// Ordered after the ticket's earlier updates, so that the
			// last one accepted is the last one applied (decision 0184).
			return true, a.msg.NakWithDelay(a.f.cfg.Retry.Delay(1))
		case c.State == string(request.StatusDelivered):
			act.ref = c.ExternalID
			if act.ref == "" {
				act.ref = c.ExternalURL
			}
		case c.State == string(request.StatusFailed) || c.State == string(request.StatusUncertain):
			why = fmt.Sprintf("the ticket's create ended %s: there is no ticket to act on", c.State)
		default:
			// Ordered after the create: set aside until it settles.
			return true, a.wait(ctx)
		}
		if why != "" {
			rec.LastError, rec.Failure = why, request.FailurePermanent
			return true, a.dead(ctx, rec, "no ticket")
		}
	}
	a.action = act
	return false, nil
}

// Parker is implemented by stores that set a comment or an update aside
// until its create settles, and publish its message again then: the
// ledger (ledger.Park) and the cluster record (clusterrec.Deliveries.Park).
type Parker interface {
	Park(ctx context.Context, requestID string) (parked bool, err error)
}

// wait settles the message of a request whose create is not delivered
// yet. Parked in the store, it is acked: a message handed back to wait
// would hold a place of the target's MaxAckPending for as long, and
// enough of them would stall every other delivery to the target. A store
// that cannot park, or a park that failed, hands the message back to be
// looked at again later; a create that settled meanwhile, at once.
func (a *attempt) wait(ctx context.Context) error {
	p, ok := a.f.ledger.(Parker)
	if !ok {
		return a.msg.NakWithDelay(a.f.cfg.Retry.Delay(1))
	}
	switch parked, err := p.Park(ctx, a.requestID); {
	case err != nil:
		a.log().Warn("forwarder: a request waiting for its ticket's create could not be set aside; handed back", "err", err)
		return a.msg.NakWithDelay(a.f.cfg.Retry.Delay(1))
	case !parked:
		return a.msg.Nak()
	}
	return a.ack()
}

// cannot says why a.t cannot make a request of kind; "" if it can.
func (a *attempt) cannot(kind string) string {
	switch _, comments := a.t.(downstream.Commenter); {
	case kind == ticket.KindComment && !comments:
		return fmt.Sprintf("target %s does not take comments", a.t.Name())
	case kind == ticket.KindUpdate:
		if _, ok := a.t.(downstream.Updater); !ok {
			return fmt.Sprintf("target %s does not take updates", a.t.Name())
		}
	}
	return ""
}

// capabilities are what the attempt's call guarantees. An update sets
// fields to values, so that a resend after an unknown outcome is harmless:
// it is resent as a keyed call would be.
func (a *attempt) capabilities() downstream.Capabilities {
	switch {
	case a.action == nil:
		return a.t.Capabilities()
	case a.action.kind == ticket.KindComment:
		return a.t.(downstream.Commenter).CommentCapabilities()
	}
	return downstream.Capabilities{DedupeKey: true}
}

// act makes the attempt's call: the create, the comment or the update.
func (a *attempt) act(ctx context.Context, d downstream.Delivery) (downstream.Receipt, error) {
	switch {
	case a.action == nil:
		return a.t.Deliver(ctx, d)
	case a.action.kind == ticket.KindComment:
		r, err := a.t.(downstream.Commenter).AddComment(ctx, a.action.comment(d))
		return downstream.Receipt(r), err
	}
	return a.t.(downstream.Updater).Update(ctx, downstream.UpdateDelivery{Key: d.Key, Attempt: d.Attempt,
		Ticket: a.action.ref, Set: a.action.set, AcceptedAt: a.action.at.Ticket.CreatedAt})
}

// finder is the lookup of the attempt's kind, if the target has one.
func (a *attempt) finder() (func(context.Context, downstream.Delivery) (downstream.Receipt, bool, error), bool) {
	if a.action == nil {
		f, ok := a.t.(downstream.Finder)
		if !ok {
			return nil, false
		}
		return f.Find, true
	}
	f, ok := a.t.(downstream.CommentFinder)
	if !ok || a.action.kind != ticket.KindComment {
		return nil, false
	}
	return func(ctx context.Context, d downstream.Delivery) (downstream.Receipt, bool, error) {
		r, found, err := f.FindComment(ctx, a.action.comment(d))
		return downstream.Receipt(r), found, err
	}, true
}

func (c *action) comment(d downstream.Delivery) downstream.CommentDelivery {
	return downstream.CommentDelivery{Key: d.Key, Attempt: d.Attempt, Ticket: c.ref, Body: c.body, AcceptedAt: c.at.Ticket.CreatedAt}
}
