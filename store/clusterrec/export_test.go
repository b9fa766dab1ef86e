package clusterrec

import (
	"context"
	"time"

	"ticketrelay/request"
	"ticketrelay/ticket"
)

// ClaimUndecided claims t, a fingerprinted create, as Front.Group does,
// and stops there: a claim cut between its claim and its group's
// decision.
func (s *Store) ClaimUndecided(ctx context.Context, t ticket.Ticket, hash string, g request.Grouping) (Claim, error) {
	return s.claim(ctx, t, hash, nil, nil, &g)
}

// DecideGroup decides the group of the claim c as Front.Group does.
func (s *Store) DecideGroup(ctx context.Context, c Claim, g request.Grouping) (Claim, error) {
	return grouper{s: s, now: time.Now}.decide(ctx, c, g)
}
