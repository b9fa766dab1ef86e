package clusterrec

import (
	"context"
	"time"

	"ticketrelay/request"
)

// AuditStore is the stream audit's store on a host of a multi-host
// installation: the ledger's, except that a published request whose
// delivery this host's ledger does not know (another host's forwarder
// delivered it) takes its delivery from the cluster record, and keeps a
// copy of it (ledger.MirrorDelivery), so that the audit does not look for
// it in the stream again and retention prunes it as it would on one host.
type AuditStore struct {
	AuditLedger
	store *Store
	after time.Duration
	now   func() time.Time
}

// NewAuditStore wraps l for an audit that looks at rows after old.
func NewAuditStore(s *Store, l AuditLedger, after time.Duration, now func() time.Time) *AuditStore {
	return &AuditStore{AuditLedger: l, store: s, after: after, now: now}
}

// PublishedAfter is the ledger's, with the delivery of each row due for
// the audit that the ledger does not know read from the record.
func (a *AuditStore) PublishedAfter(ctx context.Context, after int64, limit int) ([]request.Published, error) {
	ps, err := a.AuditLedger.PublishedAfter(ctx, after, limit)
	if err != nil {
		return nil, err
	}
	now := a.now()
	for i := range ps {
		p := &ps[i]
		if p.Settled() || p.Seq == 0 || now.Sub(p.PublishedAt) < a.after {
			continue
		}
		rec, _, found, err := a.store.Get(ctx, p.RequestID)
		if err != nil {
			return nil, err
		}
		if !found || rec.Delivery == nil || !rec.settled() {
			continue
		}
		d := rec.Delivery.Ledger(p.RequestID)
		if err := a.AuditLedger.MirrorDelivery(ctx, *d); err != nil {
			return nil, err
		}
		p.Delivery, p.DeliveryUpdated = d.State, d.UpdatedAt
	}
	return ps, nil
}
