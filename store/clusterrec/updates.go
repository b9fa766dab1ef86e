package clusterrec

// A ticket's updates in acceptance order across hosts (decision 0182).
// Each update of a ticket ticketrelay filed writes its key
// u.<create>.<update> before it is answered, so the bucket's stream
// sequence of those keys is one order of the ticket's updates, whichever
// host accepted them, and it agrees with real time: an update answered
// before another was called has the lower sequence. The forwarder holds
// an update while one of the same ticket earlier in that order is
// accepted and unsettled, as one host's ledger does by its row ids
// (decision 0184).

import (
	"context"
	"encoding/json"

	"ticketrelay/request"
	"ticketrelay/ticket"
)

// updateKey is the index key of update scoped on the create on.
func updateKey(on, scoped string) string {
	return updatePrefix + keyHash(on) + "." + keyHash(scoped)
}

// order sets p.EarlierUpdate for rec, an update of a ticket ticketrelay
// filed whose create is delivered: the forwarder reads it then only.
func (d *Deliveries) order(ctx context.Context, p *request.Prior, rec Record) error {
	t := rec.Ticket
	if t.Kind != ticket.KindUpdate || t.On == "" || p.OnDelivery.State != string(request.StatusDelivered) || rec.settled() {
		return nil
	}
	var err error
	p.EarlierUpdate, err = d.store.earlierUpdate(ctx, t.On, t.Scoped())
	return err
}

// earlierUpdate reports whether an update of the create on whose key
// precedes that of update scoped in the bucket's stream is accepted and
// not settled (delivered, failed or uncertain). A claim neither accepted
// nor being delivered does not hold it: it was not answered yet, so it is
// answered after this one was. An update without a key (accepted by a build before the keys, or
// expired) is not ordered. Every read is the stream leader's.
func (s *Store) earlierUpdate(ctx context.Context, on, scoped string) (bool, error) {
	var earlier []string
	mine := false
	err := s.scan(ctx, updatePrefix+keyHash(on)+".", func(_ string, m storedMsg) bool {
		var e indexEntry
		if json.Unmarshal(m.Data, &e) != nil {
			return true
		}
		if mine = e.Scoped == scoped; !mine {
			earlier = append(earlier, e.Scoped)
		}
		return !mine
	})
	if err != nil || !mine {
		return false, err // not mine: its own key is not there
	}
	// The nearest first: the likeliest to be unsettled still.
	for i := len(earlier) - 1; i >= 0; i-- {
		rec, _, found, err := s.Get(ctx, earlier[i])
		if err != nil {
			return false, err
		}
		if found && rec.Ticket.Kind == ticket.KindUpdate && rec.Ticket.On == on && (rec.Phase == PhaseAccepted || rec.Delivery != nil) && !rec.settled() {
			return true, nil
		}
	}
	return false, nil
}
