package clusterrec

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"time"

	"ticketrelay/internal/backoff"
	"ticketrelay/request"
	"ticketrelay/ticket"
	"ticketrelay/tracing"
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
//   - other arguments: *request.ConflictError naming the original ticket;
//     another subject's request under the same scoped id:
//     request.ErrOtherSubject;
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
	return s.claim(ctx, t, hash, busy, nil, nil)
}

// claim is Claim; may, if not nil, is asked before this host writes a
// claim (a new one or one taken over), and its error is the answer:
// a replay, a conflict or another subject's request are answered from
// the record whatever may says. A new claim holds grouping (nil: none):
// its fingerprint group is still to be decided.
func (s *Store) claim(ctx context.Context, t ticket.Ticket, hash string, busy func() bool, may func(context.Context) error,
	grouping *request.Grouping) (_ Claim, err error) {
	ctx, span := tracing.StartClaim(ctx, t.Scoped())
	defer func() { tracing.End(span, err) }()
	c := &claimer{s: s, t: t, hash: hash, key: Key(t.Scoped()), nonce: newNonce(), busy: busy, may: may, grouping: grouping}
	// Most requests are new: the first try writes without reading (a
	// conflict is the answer that the key has a record); every later one
	// reads first. A host that may not claim reads first.
	read := may != nil && may(ctx) != nil
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			select {
			case <-ctx.Done():
				return Claim{}, c.gaveUp(ctx)
			case <-time.After(pace.Delay(attempt)):
			}
		}
		next, cl, err := c.try(ctx, read)
		read = true
		switch next {
		case stepDone:
			return cl, err
		case stepNow:
			attempt = -1 // a conflict is an answer, not a failure: read again at once
		}
	}
}

// claimer is one Claim call: what it writes and what it has seen so far.
type claimer struct {
	s     *Store
	t     ticket.Ticket
	hash  string
	key   string
	nonce string
	busy  func() bool
	may   func(context.Context) error
	// grouping is how to decide a fingerprinted create's group, kept in
	// the claim until it is decided (nil: not fingerprinted).
	grouping *request.Grouping

	watched    uint64    // the revision of the other host's claim being watched
	watchStart time.Time // when it was first seen
	lastErr    error
	waiting    bool // for another host's claim
}

// step is what one try of a claim decided.
type step int

const (
	stepPause step = iota // try again after a pause
	stepNow               // try again at once
	stepDone              // the try's claim and error are the answer
)

// gaveUp is the answer of a claim whose ctx ended.
func (c *claimer) gaveUp(ctx context.Context) error {
	if c.waiting {
		return ErrInProgress
	}
	return errors.Join(ErrUnavailable, c.lastErr, ctx.Err())
}

// try reads the record (if read) and decides from it, or writes a claim if
// there is none.
func (c *claimer) try(ctx context.Context, read bool) (step, Claim, error) {
	var (
		rec   Record
		rev   uint64
		found bool
	)
	if read {
		var err error
		if rec, rev, found, err = c.s.get(ctx, c.key); err != nil {
			// A read cut short by the caller's own deadline says nothing
			// new about the record: a call that was waiting for another
			// host's claim still answers that it is in progress.
			c.lastErr = err
			if ctx.Err() == nil {
				c.waiting = false
			}
			return stepPause, Claim{}, nil
		}
	}
	if !found {
		return c.create(ctx)
	}
	return c.decide(ctx, rec, rev)
}

// create writes this call's claim where the key has no record.
func (c *claimer) create(ctx context.Context) (step, Claim, error) {
	if err := c.mayClaim(ctx); err != nil {
		return stepDone, Claim{}, err
	}
	if err := c.s.room(ctx); err != nil {
		return stepDone, Claim{}, err
	}
	claim := Record{Phase: PhaseClaimed, Host: c.s.cfg.Host, Nonce: c.nonce, ClaimedAt: c.s.now().UTC(), ArgsHash: c.hash, Ticket: c.t,
		Grouping: c.grouping}
	claim.Trace, _ = tracing.Stored(ctx)
	rev, err := c.s.create(ctx, c.key, claim)
	switch {
	case err == nil:
		return stepDone, Claim{Record: claim, Rev: rev, Mine: true}, nil
	case errors.Is(err, ErrFull):
		return stepDone, Claim{}, err
	case !errors.Is(err, errConflict):
		// Stored or not: the next read tells, after a pause.
		c.lastErr, c.waiting = err, false
		return stepPause, Claim{}, nil
	}
	c.waiting = false
	return stepNow, Claim{}, nil
}

// mayClaim asks may, if any, whether this host may write a claim.
func (c *claimer) mayClaim(ctx context.Context) error {
	if c.may == nil {
		return nil
	}
	return c.may(ctx)
}

// decide answers from the record rec at rev.
func (c *claimer) decide(ctx context.Context, rec Record, rev uint64) (step, Claim, error) {
	switch {
	case rec.Nonce == c.nonce:
		return stepDone, Claim{Record: rec, Rev: rev, Mine: true}, nil
	case rec.Ticket.Subject != c.t.Subject:
		return stepDone, Claim{}, request.ErrOtherSubject
	case rec.ArgsHash != c.hash:
		return stepDone, Claim{}, &request.ConflictError{RequestID: c.t.RequestID, TicketID: rec.Ticket.ID, Tool: rec.Ticket.Tool}
	case rec.Phase == PhaseAccepted:
		return stepDone, Claim{Record: rec, Rev: rev}, nil
	}
	return c.takeOver(ctx, rec, rev)
}

// takeOver waits for a claim another host holds and has not accepted, and
// takes it over once it stayed so for TakeoverAfter while watched, or at
// once if it is this host's own and no call of this process holds it.
func (c *claimer) takeOver(ctx context.Context, rec Record, rev uint64) (step, Claim, error) {
	if rev != c.watched {
		c.watched, c.watchStart = rev, time.Now()
	}
	own := rec.Host == c.s.cfg.Host && (c.busy == nil || !c.busy())
	if !own && time.Since(c.watchStart) < c.s.cfg.TakeoverAfter {
		c.waiting = true
		return stepPause, Claim{}, nil
	}
	if err := c.mayClaim(ctx); err != nil {
		return stepDone, Claim{}, err
	}
	taken := rec
	taken.Host, taken.Nonce, taken.ClaimedAt = c.s.cfg.Host, c.nonce, c.s.now().UTC()
	switch n, err := c.s.update(ctx, c.key, taken, rev); {
	case err == nil:
		c.s.log.Warn("took over a claim that was not accepted", "request_id", c.t.RequestID, "from_host", rec.Host)
		return stepDone, Claim{Record: taken, Rev: n, Mine: true}, nil
	case !errors.Is(err, errConflict):
		c.lastErr = err
	}
	c.waiting = false
	return stepPause, Claim{}, nil
}

// AcceptClaim is Accept for a claim this host holds at c.Rev: one write
// when nothing came between.
func (s *Store) AcceptClaim(ctx context.Context, c Claim) error {
	rec := c.Record
	rec.Phase, rec.Grouping = PhaseAccepted, nil
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
		// Committed: whatever its group was decided to be is final.
		rec.Phase, rec.Grouping = PhaseAccepted, nil
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
