package clusterrec

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"time"

	"ticketrelay/internal/backoff"
	"ticketrelay/ledger"
	"ticketrelay/ticket"
)

// Claim is the answer to a claim: the request's record and its revision,
// and whether this host now holds it (Mine: commit it to the local ledger,
// then Accept) or another host already accepted it (a replay).
type Claim struct {
	Record Record
	Rev    uint64
	Mine   bool
}

// pace spaces a claim's reads while it waits for another host, and its
// retries while the bucket does not answer (an election takes seconds).
var pace = backoff.Policy{Base: 50 * time.Millisecond, Max: 500 * time.Millisecond}

// Claim decides acceptance of t (normalized, with its ticket id and
// creation time) across the cluster before any host commits it:
//
//   - no record: it writes one (compare-and-set on revision 0) holding the
//     whole ticket, and the request is this host's;
//   - a record with the same arguments, accepted: a replay;
//   - other arguments: *ledger.ConflictError naming the original ticket;
//     another subject's request under the same scoped id:
//     ledger.ErrOtherSubject;
//   - a record claimed but not yet accepted by another host: Claim waits
//     for it, and takes the claim over (compare-and-set on its revision)
//     once it has stayed unaccepted for TakeoverAfter while watched, or at
//     once if it is this host's own (left by a crash: this host holds no
//     call for it; busy says whether a call of this process does).
//
// A write whose answer was lost may have been stored: the claim carries a
// nonce, and a read that finds it knows it for this call's. Claim retries
// until ctx ends; then ErrInProgress if another host still held an
// unaccepted claim, else ErrUnavailable. Nothing is written on a conflict.
func (s *Store) Claim(ctx context.Context, t ticket.Ticket, hash string, busy func() bool) (Claim, error) {
	key := Key(t.Scoped())
	nonce := newNonce()
	var (
		watched    uint64    // the revision of the other host's claim being watched
		watchStart time.Time // when it was first seen
		lastErr    error
		waiting    bool
		read       bool // whether this try reads the record first
	)
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			select {
			case <-ctx.Done():
				if waiting {
					return Claim{}, ErrInProgress
				}
				return Claim{}, errors.Join(ErrUnavailable, lastErr, ctx.Err())
			case <-time.After(pace.Delay(attempt)):
			}
		}
		// Most requests are new: the first try writes without reading (a
		// conflict is the answer that the key has a record); every later
		// one reads first.
		var (
			rec   Record
			rev   uint64
			found bool
		)
		if read {
			var err error
			if rec, rev, found, err = s.get(ctx, key); err != nil {
				lastErr, waiting = err, false
				continue
			}
		}
		read = true
		if !found {
			if err := s.room(ctx); err != nil {
				return Claim{}, err
			}
			claim := Record{Phase: PhaseClaimed, Host: s.cfg.Host, Nonce: nonce, ClaimedAt: s.now().UTC(), ArgsHash: hash, Ticket: t}
			rev, err := s.create(ctx, key, claim)
			switch {
			case err == nil:
				return Claim{Record: claim, Rev: rev, Mine: true}, nil
			case errors.Is(err, ErrFull):
				return Claim{}, err
			case !errors.Is(err, errConflict):
				// Stored or not: the next read tells, after a pause.
				lastErr, waiting = err, false
				continue
			}
			waiting = false
			attempt = -1 // a conflict is an answer, not a failure: read again at once
			continue
		}
		if rec.Nonce == nonce {
			return Claim{Record: rec, Rev: rev, Mine: true}, nil
		}
		if rec.Ticket.Subject != t.Subject {
			return Claim{}, ledger.ErrOtherSubject
		}
		if rec.ArgsHash != hash {
			return Claim{}, &ledger.ConflictError{RequestID: t.RequestID, TicketID: rec.Ticket.ID, Tool: rec.Ticket.Tool}
		}
		if rec.Phase == PhaseAccepted {
			return Claim{Record: rec, Rev: rev}, nil
		}
		// Claimed, not accepted.
		if rev != watched {
			watched, watchStart = rev, time.Now()
		}
		own := rec.Host == s.cfg.Host && (busy == nil || !busy())
		if !own && time.Since(watchStart) < s.cfg.TakeoverAfter {
			waiting = true
			continue
		}
		taken := rec
		taken.Host, taken.Nonce, taken.ClaimedAt = s.cfg.Host, nonce, s.now().UTC()
		switch n, err := s.update(ctx, key, taken, rev); {
		case err == nil:
			s.log.Warn("took over a claim that was not accepted", "request_id", t.RequestID, "from_host", rec.Host)
			return Claim{Record: taken, Rev: n, Mine: true}, nil
		case !errors.Is(err, errConflict):
			lastErr = err
		}
		waiting = false
	}
}

// AcceptClaim is Accept for a claim this host holds at c.Rev: one write
// when nothing came between.
func (s *Store) AcceptClaim(ctx context.Context, c Claim) error {
	rec := c.Record
	rec.Phase = PhaseAccepted
	if _, err := s.update(ctx, Key(rec.Scoped()), rec, c.Rev); err == nil || errors.Is(err, ErrFull) {
		return err
	}
	return s.Accept(ctx, rec.Scoped())
}

// Accept marks this host's claim accepted once the request is committed
// to the local ledger. The claim already holds the ticket, so the request
// is safe whatever Accept answers; a failure only leaves the claim to be
// taken over by a retry (the same ticket, committed once more elsewhere:
// the stream and the record keep it to one delivery). A claim another
// host took over, or already accepted, is left as it is.
func (s *Store) Accept(ctx context.Context, scoped string) error {
	key := Key(scoped)
	ctx, cancel := context.WithTimeout(ctx, 10*s.cfg.OpTimeout)
	defer cancel()
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			select {
			case <-ctx.Done():
				return errors.Join(ErrUnavailable, ctx.Err())
			case <-time.After(pace.Delay(attempt)):
			}
		}
		rec, rev, found, err := s.get(ctx, key)
		if err != nil {
			continue
		}
		if !found || rec.Phase == PhaseAccepted || rec.Host != s.cfg.Host {
			return nil
		}
		rec.Phase = PhaseAccepted
		if _, err := s.update(ctx, key, rec, rev); err == nil || errors.Is(err, ErrFull) {
			return err
		} else if errors.Is(err, errConflict) {
			attempt = -1 // a delivery or a takeover came first: read again at once
		}
	}
}

func newNonce() string {
	b := make([]byte, 12)
	rand.Read(b)
	return hex.EncodeToString(b)
}
