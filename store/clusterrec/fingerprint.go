package clusterrec

// Fingerprinted creates in a multi-host installation (decision 0195). The
// request id is claimed first, as for any create; then, while the claim
// is this host's and not yet committed, the fingerprint's group record
// decides what it is: a compare-and-set creates the group (the first
// report: a ticket), or the claim is rewritten into an occurrence comment
// on the group's ticket, whichever host holds that ticket.

import (
	"context"
	"errors"
	"strings"
	"time"

	"ticketrelay/request"
	"ticketrelay/ticket"
)

// groupPrefix starts every fingerprint group's key.
const groupPrefix = "f."

// Grouped is what a record says of a report stored as an occurrence.
type Grouped struct {
	On          string `json:"on"` // the request_id that filed the ticket
	Occurrences int    `json:"occurrences"`
}

// answer sets res's grouping from g (nil: not grouped).
func (g *Grouped) answer(res *request.Result) {
	if g != nil {
		res.Grouped, res.GroupedOn, res.Occurrences = true, g.On, g.Occurrences
	}
}

// link sets, for a grouped res, where its ticket was delivered, from the
// record of the ticket's create.
func (f *Front) link(ctx context.Context, subject string, res *request.Result) {
	if !res.Grouped {
		return
	}
	if rec, _, found, err := f.store.Get(ctx, ticket.ScopedID(subject, res.GroupedOn)); err == nil && found && rec.Delivery != nil {
		res.TicketLink = request.Link{ExternalID: rec.Delivery.ExternalID, ExternalURL: rec.Delivery.ExternalURL}
	}
}

// Group is a fingerprint's group record: the ticket its reports go to
// while it is open.
type Group struct {
	Format      int       `json:"v"`
	First       string    `json:"first"` // the scoped id of the create that filed the ticket
	OpenedAt    time.Time `json:"opened_at"`
	Occurrences int       `json:"occurrences"` // reports counted, the first included
	Closed      bool      `json:"closed,omitempty"`
	// Counted names the last reports counted (countedOf of their scoped
	// ids, the newest last): the last is occurrence number Occurrences, the
	// one before it Occurrences-1, and so on. A report counted by a host
	// lost before it rewrote its claim finds its number here when its
	// claim is taken over or adopted, instead of being counted again.
	Counted []string `json:"counted,omitempty"`
}

// countedKept is how many reports a group's record names in Counted: a
// report whose claim is completed after more than that many others were
// counted meanwhile is counted again (decision 0188).
const countedKept = 64

// countedOf names scoped in a group's Counted: 96 bits of its key's hash.
func countedOf(scoped string) string { return keyHash(scoped)[:16] }

// number is the occurrence number the group counted scoped under, if it
// is one of the last countedKept counted.
func (g Group) number(scoped string) (int, bool) {
	c := countedOf(scoped)
	for i, id := range g.Counted {
		if id == c {
			return g.Occurrences - (len(g.Counted) - 1 - i), true
		}
	}
	return 0, false
}

func groupKey(t ticket.Request) string {
	return groupPrefix + request.GroupKey(t.Subject, t.Target, t.Fingerprint)
}

func (s *Store) group(ctx context.Context, key string) (g Group, rev uint64, found bool, err error) {
	rev, found, err = s.getJSON(ctx, key, &g)
	return g, rev, found, err
}

func (s *Store) writeGroup(ctx context.Context, key string, g Group, rev uint64, create bool) (uint64, error) {
	g.Format = FormatVersion
	return s.writeJSON(ctx, key, g, rev, create)
}

// Group accepts req, a fingerprinted create, exactly once across the
// cluster: a ticket if its fingerprint has no open group, else an
// occurrence of the group's ticket (g); a repeat replays either.
func (f *Front) Group(ctx context.Context, req ticket.Request, g request.Grouping) (request.Result, error) {
	res, err := f.create(ctx, req, &g)
	if err == nil {
		f.link(ctx, req.Subject, &res)
	}
	return res, err
}

// grouper decides the fingerprint groups of claims on s: the front for
// its calls, the heartbeat service for a lost host's claims it adopts.
type grouper struct {
	s   *Store
	now func() time.Time
}

// undecided reports whether rec is a claim of a fingerprinted create
// whose group was not decided before it was cut: adoption decides it
// before committing it.
func (r Record) undecided() bool {
	return r.Phase == PhaseClaimed && r.Grouping != nil && r.Ticket.Kind == ticket.KindCreate && r.Ticket.Fingerprint != ""
}

// decide decides what the claim c, held by this host, of a fingerprinted
// create is. A claim already rewritten into an occurrence (taken over
// after a crash) stays one; a create the group names (its own, before a
// crash) stays a create; a report the group counted before a crash keeps
// its number. The claim returned says its group is decided.
func (gr grouper) decide(ctx context.Context, c Claim, g request.Grouping) (Claim, error) {
	t := c.Record.Ticket
	if t.Kind != ticket.KindCreate || t.Fingerprint == "" {
		return c, nil
	}
	key, scoped := groupKey(t.Request), t.Scoped()
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			select {
			case <-ctx.Done():
				return Claim{}, errors.Join(ErrUnavailable, ctx.Err())
			case <-time.After(pace.Delay(attempt)):
			}
		}
		grp, rev, found, err := gr.s.group(ctx, key)
		if err != nil {
			continue
		}
		if found && grp.First == scoped {
			c.Record.Grouping = nil
			return c, nil
		}
		if n, counted := grp.number(scoped); found && counted {
			return gr.occur(ctx, c, grp.First, n, g.Comments)
		}
		if found && gr.open(ctx, grp, g.Window) {
			n := grp.Occurrences + 1
			grp.Occurrences = n
			grp.Counted = append(grp.Counted, countedOf(scoped))
			if len(grp.Counted) > countedKept {
				grp.Counted = grp.Counted[len(grp.Counted)-countedKept:]
			}
			switch _, err := gr.s.writeGroup(ctx, key, grp, rev, false); {
			case errors.Is(err, errConflict):
				attempt = -1 // another report came first: read again at once
				continue
			case errors.Is(err, ErrFull):
				return Claim{}, err
			case err != nil:
				continue
			}
			return gr.occur(ctx, c, grp.First, n, g.Comments)
		}
		mine := Group{First: scoped, OpenedAt: t.CreatedAt, Occurrences: 1}
		switch _, err := gr.s.writeGroup(ctx, key, mine, rev, !found); {
		case err == nil:
			c.Record.Grouping = nil
			return c, nil
		case errors.Is(err, errConflict):
			attempt = -1 // another first report won: join it
		case errors.Is(err, ErrFull):
			return Claim{}, err
		}
	}
}

// open reports whether grp's ticket still takes occurrences: not closed
// through ticketrelay, within window of its first report, and its create
// not failed.
func (gr grouper) open(ctx context.Context, grp Group, window time.Duration) bool {
	if grp.Closed || !gr.now().Before(grp.OpenedAt.Add(window)) {
		return false
	}
	rec, _, found, err := gr.s.Get(ctx, grp.First)
	return err != nil || !found || rec.Delivery == nil || rec.Delivery.State != string(request.StatusFailed)
}

// occur rewrites the claim c into the n-th report on the ticket first
// filed, before any host commits it: an occurrence comment, or, where the
// target takes no comments, one whose delivery is settled, since nothing
// is to be written downstream.
func (gr grouper) occur(ctx context.Context, c Claim, first string, n int, comments bool) (Claim, error) {
	rec := c.Record
	req := rec.Ticket.Request
	rec.Ticket.Request = request.Occurrence(req, first, n)
	rec.Ticket.ID = rec.Ticket.TicketID()
	rec.Group = &Grouped{On: requestIDOf(first, req.Subject), Occurrences: n}
	rec.Grouping = nil
	if !comments {
		rec.Delivery = &Delivery{Target: req.Target, State: string(request.StatusDelivered), UpdatedAt: gr.now().UTC(), By: gr.s.Host(), Version: 1}
	}
	rev, err := gr.s.update(ctx, Key(rec.Scoped()), rec, c.Rev)
	if err != nil {
		// Taken over meanwhile, or not written: a retry decides again.
		return Claim{}, errors.Join(ErrUnavailable, err)
	}
	return Claim{Record: rec, Rev: rev, Mine: c.Mine}, nil
}

// requestIDOf is the request id of subject's scoped id.
func requestIDOf(scoped, subject string) string {
	return strings.TrimPrefix(scoped, ticket.ScopedID(subject, ""))
}

// CloseGroup ends the group of the ticket whose create is on (a scoped
// id), once an update closing it is accepted: the fingerprint's next
// report files a new ticket.
func (f *Front) CloseGroup(ctx context.Context, on string) error {
	rec, _, found, err := f.store.Get(ctx, on)
	if err != nil || !found || rec.Ticket.Fingerprint == "" || rec.Ticket.Kind != ticket.KindCreate {
		return err
	}
	key := groupKey(rec.Ticket.Request)
	for {
		grp, rev, found, err := f.store.group(ctx, key)
		if err != nil || !found || grp.First != on || grp.Closed {
			return err
		}
		grp.Closed = true
		if _, err := f.store.writeGroup(ctx, key, grp, rev, false); !errors.Is(err, errConflict) {
			return err
		}
	}
}
