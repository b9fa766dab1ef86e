package dispatcher

import (
	"context"
	"os"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"ticketrelay/internal/maintenance"
	"ticketrelay/internal/operate"
	"ticketrelay/store/ledger"
	"ticketrelay/store/trail"
)

// MinAuditRetention is the shortest -audit-retention.
const MinAuditRetention = time.Hour

// auditRetentionEvery is how often retention removes expired entries.
const auditRetentionEvery = 10 * time.Minute

// buildTrail makes the audit trail's services: its retention, the file
// sink (-audit-file) and, with -multi-host, the shipping of this host's
// entries to the installation's trail stream.
func (d *dispatcher) buildTrail(ctx context.Context) error {
	store, err := trail.Open(ctx, d.o.DB)
	if err != nil {
		return err
	}
	d.OnClose(func() { store.Close() })
	d.trail = store
	log := d.log.With("component", "trail")
	keep := d.o.AuditRetention
	d.services["trail-retention"] = maintenance.Loop{Interval: auditRetentionEvery, Eager: true, Log: log,
		Failed: "audit trail retention failed; retrying",
		RunOnce: func(ctx context.Context) error {
			n, err := store.PruneBefore(ctx, d.arch.Now().Add(-keep))
			if n > 0 {
				log.Info("audit trail entries past -audit-retention removed", "entries", n, "retention", keep)
			}
			return err
		}}.Run
	host := ""
	if d.o.MultiHost {
		host = d.ledgerID
		// The replicated stream waits for the cluster as the ticket stream
		// and the request bucket do: a dispatcher started beside a cluster
		// still electing its leaders must not give up on the first timeout.
		if _, err := untilReady(ctx, log, "audit trail stream not ready; retrying", func(ctx context.Context) (jetstream.Stream, error) {
			return trail.EnsureStream(ctx, d.js, d.stream.Installation, d.o.Replicas, keep)
		}); err != nil {
			return err
		}
		shipper := &trail.Shipper{Store: store, JS: d.js, Installation: d.stream.Installation, Host: host, Log: log}
		d.services["trail-ship"] = shipper.Run
	}
	if d.o.AuditFile != "" {
		sink := &trail.FileSink{Store: store, Path: d.o.AuditFile, Host: host, Log: log}
		d.services["trail-file"] = sink.Run
	}
	return nil
}

// operated is the ledger as the operator commands use it, with the
// database's audit trail beside it.
type operated struct {
	*ledger.Ledger
	trail *trail.Store
}

var _ adminStore = (*operated)(nil)

// Trail is the audit trail of the database, for `dispatcher audit`.
func (o *operated) Trail() *trail.Store { return o.trail }

// streamRecorder records operator actions in the installation's trail
// stream: forget-host has no database, and the stream (made by the
// dispatchers) is where every host's trail is read.
type streamRecorder struct{ c clusterConn }

func (r streamRecorder) Record(ctx context.Context, e operate.Entry) error {
	where, _ := os.Hostname()
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return trail.Publish(pctx, r.c.js, r.c.inst, where, operate.TrailEntry(e))
}
