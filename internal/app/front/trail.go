package front

import (
	"context"
	"net/http"
	"time"

	"ticketrelay/front/mcphttp"
	"ticketrelay/store/trail"
)

// openTrail opens the audit trail beside the ledger (-audit): an
// asynchronous writer on the database's trail table, closed (its queue
// written) before the ledger.
func (f *front) openTrail(ctx context.Context, commit trail.GroupCommit) error {
	if !f.o.Audit {
		return nil
	}
	store, err := trail.Open(ctx, f.o.DB)
	if err != nil {
		return err
	}
	f.OnClose(func() { store.Close() })
	w := trail.NewWriter(store, trail.WriterConfig{Commit: commit}, f.log.With("component", "trail"), time.Now, f.reg)
	f.OnClose(func() { w.Close() })
	f.trail = w
	return nil
}

// auditRefusals records in the trail the requests the HTTP layer refused
// for a caller it knows; without the trail, none.
func (f *front) auditRefusals(hc *mcphttp.Config) {
	if f.trail == nil {
		return
	}
	hc.Audit = func(r *http.Request, subject, tool, reason string) {
		_ = f.trail.Record(r.Context(), trail.Entry{Time: time.Now(), Kind: trail.KindCall, Subject: subject,
			Tool: tool, Outcome: trail.Refused, Reason: reason})
	}
}
