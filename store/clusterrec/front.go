package clusterrec

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"ticketrelay/internal/archetype"
	"ticketrelay/internal/failpoint"
	"ticketrelay/request"
	"ticketrelay/ticket"
)

// Front accepts and reports requests on one host of a multi-host
// installation: the cluster record decides, then the host's own ledger
// commits, then the caller is answered. It has the methods of the ledger
// that mcp-front's tools use.
type Front struct {
	store  *Store
	ledger Local
	log    *slog.Logger
	now    func() time.Time
	// ClaimTimeout bounds how long a call waits for the cluster (an
	// election, another host's claim) before it answers that it could not
	// decide. Default 20s: longer than an election (4–9 s), shorter than
	// a client's time limit.
	ClaimTimeout time.Duration

	mu   sync.Mutex
	busy map[string]int // scoped id → this process's calls for it

	beatMu   sync.Mutex // guards the fields below; held across their read
	beatRead time.Time  // when the host's heartbeat was last read
	adopted  bool       // as it said then
	// announced: this host's heartbeat was seen, or written by the front.
	announced bool
}

// NewFront builds the multi-host front of l on s.
func NewFront(arch archetype.Archetype, s *Store, l Local) *Front {
	arch = arch.WithDefaults()
	return &Front{store: s, ledger: l, log: arch.Logger, now: arch.Now, ClaimTimeout: 20 * time.Second, busy: map[string]int{}}
}

// hold counts a call of this process for scoped until release; held
// reports whether another call of this process holds it too.
func (f *Front) hold(scoped string) (held func() bool, release func()) {
	f.mu.Lock()
	f.busy[scoped]++
	f.mu.Unlock()
	held = func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.busy[scoped] > 1
	}
	release = func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.busy[scoped]--; f.busy[scoped] == 0 {
			delete(f.busy, scoped)
		}
	}
	return held, release
}

// Create accepts req exactly once across the cluster (see Store.Claim),
// committing it to this host's ledger when this host holds it. A replay
// answers from the record, with where the request stands now. A host the
// others adopted refuses to claim (ErrOrphaned), but still answers a
// replay or a conflict: those need no delivery of its own.
func (f *Front) Create(ctx context.Context, req ticket.Request) (request.Result, error) {
	return f.create(ctx, req, nil)
}

// create is Create; g, if not nil, is how to decide the fingerprint group
// of req, which may turn a claim this host holds into an occurrence under
// the same request id before it is committed (fingerprint.go). The claim
// holds g until the decision is written, so that a host adopting it
// decides it too.
func (f *Front) create(ctx context.Context, req ticket.Request, g *request.Grouping) (request.Result, error) {
	scoped := req.Scoped()
	hash := req.Hash()
	t := ticket.Ticket{Request: req, ID: req.TicketID(), CreatedAt: f.now().UTC()}
	indexed := f.store.indexing(ctx, t, f.ClaimTimeout) // beside the claim (tickets.go)
	held, release := f.hold(scoped)
	defer release()
	cctx, cancel := context.WithTimeout(ctx, f.ClaimTimeout)
	defer cancel()
	c, err := f.store.claim(cctx, t, hash, held, f.dispatcherAlive, g)
	if err != nil {
		return request.Result{}, err
	}
	if !c.Mine {
		return f.replay(req, c.Record), nil
	}
	if err := indexed(); err != nil {
		return request.Result{}, err // the claim is left to a retry, which takes it over
	}
	failpoint.Hit(failpoint.FrontAfterClaim) // claimed, not yet committed
	if g != nil {
		if c, err = (grouper{s: f.store, now: f.now}).decide(cctx, c, *g); err != nil {
			return request.Result{}, err
		}
	}
	// The claim's ticket, not t: a claim taken over keeps the time the
	// request was first accepted, and every host stores the same ticket.
	res, err := f.ledger.CreateAt(ctx, c.Record.Ticket.Request, hash, c.Record.Ticket.CreatedAt)
	if err != nil {
		return request.Result{}, err
	}
	if err := f.store.AcceptClaim(ctx, c); err != nil {
		// The claim holds the ticket and this ledger has committed it: the
		// request is accepted. A retry may take the claim over; the stream
		// and the record keep it to one delivery.
		f.log.Warn("accepted, but the cluster record still says claimed", "request_id", req.RequestID, "err", err)
	}
	c.Record.Group.answer(&res)
	return res, nil
}

// ErrOrphaned: this host's dispatcher was found lost and the other hosts
// adopted its requests; what this host accepted now would wait for it.
var ErrOrphaned = errors.New("clusterrec: this host's dispatcher is not running (the other hosts took over its requests)")

// dispatcherAlive refuses new requests while this host's heartbeat says the
// other hosts adopted it (its dispatcher was lost): the requests would
// wait in this host's outbox for a dispatcher that is gone. Read at most
// once per heartbeatEvery.
//
// A host with no heartbeat yet (its dispatcher has not beaten, or never
// will) gets one written by its front before the first claim
// (Store.announce): the other hosts only adopt hosts they see a heartbeat
// of, and a request accepted here must not depend on this host's
// dispatcher ever starting. If the dispatcher does not beat within
// -host-dead-after, the others adopt what the front accepted.
func (f *Front) dispatcherAlive(ctx context.Context) error {
	f.beatMu.Lock()
	defer f.beatMu.Unlock()
	if time.Since(f.beatRead) >= heartbeatEvery {
		f.beatRead = time.Now()
		hb, found, err := f.store.heartbeat(ctx, f.store.Host())
		switch {
		case err == nil && found:
			f.adopted, f.announced = hb.State != HostLive, true
		case err == nil:
			if err := f.store.announce(ctx); err != nil {
				f.beatRead = time.Time{} // read again at the next call
				return fmt.Errorf("%w: this host has no heartbeat, and writing one failed: %w", ErrUnavailable, err)
			}
			f.adopted, f.announced = false, true
		case !f.announced:
			f.beatRead = time.Time{}
			return fmt.Errorf("%w: this host's heartbeat could not be read: %w", ErrUnavailable, err)
		}
	}
	if f.adopted {
		return fmt.Errorf("%w: %w", ErrUnavailable, ErrOrphaned)
	}
	return nil
}

// heartbeatEvery is how often the front reads its host's heartbeat.
const heartbeatEvery = time.Second

// replay is the answer to a request another call accepted, from its
// record.
func (f *Front) replay(req ticket.Request, rec Record) request.Result {
	st := f.status(req.RequestID, rec)
	res := request.Result{RequestID: req.RequestID, TicketID: rec.Ticket.ID, Target: rec.Ticket.Target,
		Status: st.Status, CreatedAt: rec.Ticket.CreatedAt, Replayed: true, Live: &st}
	rec.Group.answer(&res)
	return res
}

// status is where rec's request stands: its delivery as the record holds
// it. The record does not say when the request was published; before a
// delivery record it is queued.
func (f *Front) status(requestID string, rec Record) request.Report {
	t := rec.Ticket
	t.RequestID = requestID
	return request.StatusOf(t, t.CreatedAt, nil, rec.Delivery.Ledger(rec.Scoped()))
}

// Find reports subject's request from the cluster record; a request the
// record does not hold may be one this host accepted before it joined a
// multi-host installation, and is looked up in its ledger.
func (f *Front) Find(ctx context.Context, subject, requestID string) (request.Report, error) {
	scoped := ticket.ScopedID(subject, requestID)
	rec, _, found, err := f.store.Get(ctx, scoped)
	switch {
	case err != nil:
		return request.Report{}, err
	case !found:
		return f.ledger.Find(ctx, subject, requestID)
	case rec.Ticket.Subject != subject:
		// Another subject's request under the same scoped id (an anonymous
		// id that spells it): unknown to this caller.
		return f.ledger.Find(ctx, subject, requestID)
	}
	st := f.status(requestID, rec)
	if rec.Delivery == nil && rec.Host == f.store.Host() {
		// This host holds it: its ledger knows whether it was published.
		if local, err := f.ledger.Find(ctx, subject, requestID); err == nil && local.Status != request.StatusUnknown {
			return local, nil
		}
	}
	if rec.Delivery == nil && rec.Phase == PhaseClaimed {
		// A call that was cut between its claim and its answer, or one
		// in progress: nothing says it was accepted, and a repeat with the
		// same arguments completes it (taking the claim over) or replays
		// it. "queued" would tell the agent not to call again.
		return request.InterruptedStatus(requestID), nil
	}
	return st, nil
}

// Ledger is d as the ledger's delivery record of scoped; nil for none.
func (d *Delivery) Ledger(scoped string) *request.Delivery {
	if d == nil {
		return nil
	}
	return &request.Delivery{RequestID: scoped, Target: d.Target, State: d.State, Attempts: d.Attempts, Throttled: d.Throttled,
		NextAttemptAt: d.NextAttemptAt, LastError: d.LastError, Failure: d.Failure, ExternalID: d.ExternalID, ExternalURL: d.ExternalURL,
		UpdatedAt: d.UpdatedAt}
}

// TicketOf finds the create ref names among subject's requests, for a
// comment or an update: in this host's ledger, which holds the creates
// this host accepted, then in the cluster record, which holds every
// host's: by ticket_id through its index key (tickets.go), by request_id
// directly.
func (f *Front) TicketOf(ctx context.Context, subject, ref string) (ticket.Ticket, bool, error) {
	t, found, err := f.ledger.TicketOf(ctx, subject, ref)
	if err != nil || found {
		return t, found, err
	}
	if t, found, err = f.byTicketID(ctx, subject, ref); err != nil || found || ticket.ValidateRequestID(ref) != nil {
		return t, found, err
	}
	return f.createOf(ctx, subject, ticket.ScopedID(subject, ref))
}
