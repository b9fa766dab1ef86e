package clusterrec

import (
	"context"
	"time"

	"ticketrelay/request"
	"ticketrelay/ticket"
)

// The parts of a host's own ledger that the cluster record's services use,
// each declared by its user.

// Committer commits a request the cluster record decided to this host's
// ledger, under the ticket's own acceptance time (Front, Hosts).
type Committer interface {
	CreateAt(ctx context.Context, req ticket.Request, hash string, at time.Time) (request.Result, error)
}

// Local is the host's ledger as the multi-host front uses it: it commits
// what the record decided and reports requests the record does not hold.
type Local interface {
	Committer
	Find(ctx context.Context, subject, requestID string) (request.Report, error)
	TicketOf(ctx context.Context, subject, ref string) (ticket.Ticket, bool, error)
}

// Mirror keeps the host's own copy of a delivery record the cluster record
// decided (ledger.MirrorDelivery).
type Mirror interface {
	MirrorDelivery(ctx context.Context, d request.Delivery) error
}

// AuditLedger is the host's ledger as the stream audit of a multi-host
// installation uses it (see AuditStore).
type AuditLedger interface {
	Mirror
	PublishedAfter(ctx context.Context, after int64, limit int) ([]request.Published, error)
	LastID(ctx context.Context) (int64, error)
	RepublishLost(ctx context.Context, p request.Published) (bool, error)
	Served(ctx context.Context) (request.Served, error)
}
