package clusterrec

// Index keys (decisions 0181, 0182). A record's key is a hash of its
// scoped id, which a ticket id (also a hash of it) cannot be turned back
// into: the create's claim writes, beside the record, a key under its
// ticket id that names the create, so that every host resolves the
// ticket id the caller was answered. An update on a ticket ticketrelay
// filed writes a key under its ticket's create whose place in the
// bucket's stream orders it among that ticket's updates (updates.go).
// Each is written once, with a KV create, before the request is
// answered; a repeat finds it there and keeps it. Like the records, they
// expire with the bucket's max age.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"ticketrelay/ticket"
)

const (
	ticketPrefix = "t." // t.<ticket_id>: the create that ticket id names
	updatePrefix = "u." // u.<hash of the create's scoped id>.<hash of the update's>
)

// indexEntry is an index key's value: the scoped id of the request it
// names.
type indexEntry struct {
	Format int    `json:"v"`
	Scoped string `json:"scoped"`
}

// ErrIndexTaken: an index key names another request; for a ticket id, a
// collision of the 13 bytes of SHA-256 it holds. Nothing is accepted.
var ErrIndexTaken = errors.New("clusterrec: the index key names another request")

// indexKeys are t's index keys: a create's ticket id, an update's place
// among the updates of the ticket it acts on. Comments need none.
func indexKeys(t ticket.Ticket) []string {
	switch {
	case t.Kind == ticket.KindCreate:
		return []string{ticketPrefix + t.ID}
	case t.Kind == ticket.KindUpdate && t.On != "":
		return []string{updateKey(t.On, t.Scoped())}
	}
	return nil
}

// indexing writes t's index keys beside its claim, within timeout, and
// returns the wait for them. Not waited for (a replay, a claim that
// failed), the write still ends within timeout.
func (s *Store) indexing(ctx context.Context, t ticket.Ticket, timeout time.Duration) (wait func() error) {
	if len(indexKeys(t)) == 0 {
		return func() error { return nil }
	}
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		done <- s.ensureIndex(ctx, t)
	}()
	return func() error { return <-done }
}

// ensureIndex writes t's index keys that are not there yet. It retries
// while the bucket does not answer, until ctx ends (ErrUnavailable); a
// key naming another request is ErrIndexTaken.
func (s *Store) ensureIndex(ctx context.Context, t ticket.Ticket) error {
	for _, key := range indexKeys(t) {
		if err := s.ensureKey(ctx, key, t.Scoped()); err != nil {
			return fmt.Errorf("clusterrec: index %s of %s: %w", key, t.RequestID, err)
		}
	}
	return nil
}

func (s *Store) ensureKey(ctx context.Context, key, scoped string) error {
	var lastErr error
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			select {
			case <-ctx.Done():
				return errors.Join(ErrUnavailable, lastErr, ctx.Err())
			case <-time.After(pace.Delay(attempt)):
			}
		}
		_, err := s.writeJSON(ctx, key, indexEntry{Format: FormatVersion, Scoped: scoped}, 0, true)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, ErrFull):
			return err
		case !errors.Is(err, errConflict):
			lastErr = err // stored or not: the next try tells
			continue
		}
		// There already: this request's own (a retry, a takeover, an
		// adoption, a write whose answer was lost), or another's.
		var e indexEntry
		switch _, found, err := s.getJSON(ctx, key, &e); {
		case err != nil:
			lastErr = err
		case !found:
			attempt = -1 // deleted since: write it again at once
		case e.Scoped != scoped:
			return fmt.Errorf("%w (%q)", ErrIndexTaken, e.Scoped)
		default:
			return nil
		}
	}
}

// byTicketID finds subject's create whose ticket id is ref through its
// index key; found is false if ref is no ticket id, or names no create
// of subject's.
func (f *Front) byTicketID(ctx context.Context, subject, ref string) (ticket.Ticket, bool, error) {
	if !ticket.IsID(ref) {
		return ticket.Ticket{}, false, nil
	}
	var e indexEntry
	if _, found, err := f.store.getJSON(ctx, ticketPrefix+ref, &e); err != nil || !found {
		return ticket.Ticket{}, false, err
	}
	return f.createOf(ctx, subject, e.Scoped)
}

// createOf is subject's create whose scoped id is scoped, from its record.
func (f *Front) createOf(ctx context.Context, subject, scoped string) (ticket.Ticket, bool, error) {
	rec, _, found, err := f.store.Get(ctx, scoped)
	if err != nil || !found || rec.Ticket.Kind != ticket.KindCreate || rec.Ticket.Subject != subject {
		return ticket.Ticket{}, false, err
	}
	return rec.Ticket, true, nil
}
