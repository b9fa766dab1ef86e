package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/user"
	"time"

	"ticketrelay/internal/maintenance"
	"ticketrelay/ledger"
	"ticketrelay/request"
	"ticketrelay/ticket"
	"ticketrelay/trail"
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
		if _, err := trail.EnsureStream(ctx, d.js, d.stream.Installation, d.o.Replicas, keep); err != nil {
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

// operatorName is who runs an operator command, as the trail records it:
// -operator, else the OS user ("os:NAME").
func operatorName(flagged string) string {
	if flagged != "" {
		return flagged
	}
	if u, err := user.Current(); err == nil && u.Username != "" {
		return "os:" + u.Username
	}
	return fmt.Sprintf("os:uid-%d", os.Getuid())
}

// operated is the ledger as the operator commands use it: every action
// they take through it is recorded in the audit trail, with its outcome,
// under the operator's name.
type operated struct {
	*ledger.Ledger
	trail    *trail.Store
	operator string
	now      func() time.Time
}

var _ adminStore = (*operated)(nil)

// Trail is the audit trail of the database, for `dispatcher audit`.
func (o *operated) Trail() *trail.Store { return o.trail }

// note records one action on id (a scoped request id, or "" for none)
// that ended with err; its error is the recording's.
func (o *operated) note(ctx context.Context, action, id, reason string, err error) error {
	e := trail.Entry{Time: o.now(), Kind: trail.KindOperator, Subject: o.operator, Action: action,
		RequestID: id, Outcome: trail.Done, Reason: reason}
	if id != "" {
		e.TicketID = ticket.IDFor(id)
	}
	if err != nil {
		e.Outcome = trail.Failed
		if !errors.Is(err, request.ErrNotFound) && !errors.Is(err, request.ErrState) {
			e.Outcome = trail.Error
		}
		e.Reason = trail.Entry{Reason: err.Error()}.Clean().Reason
	}
	// The action happened whatever the trail says: record it even if the
	// command was interrupted.
	if rerr := o.trail.Record(context.WithoutCancel(ctx), e); rerr != nil {
		return fmt.Errorf("%s %s was done, but the audit trail could not record it: %w", action, id, rerr)
	}
	return nil
}

func (o *operated) Redrive(ctx context.Context, requestID string) error {
	err := o.Ledger.Redrive(ctx, requestID)
	return errors.Join(err, o.note(ctx, "redrive", requestID, "", err))
}

func (o *operated) RedriveFailed(ctx context.Context, target string) ([]string, error) {
	ids, err := o.Ledger.RedriveFailed(ctx, target)
	var errs []error
	for _, id := range ids {
		errs = append(errs, o.note(ctx, "redrive", id, "-failed", nil))
	}
	if err != nil || len(ids) == 0 {
		// Nothing to name a request by: one entry says what was asked.
		reason := fmt.Sprintf("-failed: %d redriven", len(ids))
		if target != "" {
			reason = fmt.Sprintf("-failed -target %s: %d redriven", target, len(ids))
		}
		errs = append(errs, o.note(ctx, "redrive", "", reason, err))
	}
	return ids, errors.Join(append([]error{err}, errs...)...)
}

func (o *operated) Resolve(ctx context.Context, requestID string, delivered bool, externalID string) error {
	err := o.Ledger.Resolve(ctx, requestID, delivered, externalID)
	reason := "settled as failed"
	if delivered {
		reason = "settled as delivered, external id " + externalID
	}
	return errors.Join(err, o.note(ctx, "resolve", requestID, reason, err))
}

// recordForgetHost records forget-host of host, which ended with err, in
// the installation's trail stream: the command has no database, and the
// stream (made by the dispatchers) is where every host's trail is read.
func recordForgetHost(ctx context.Context, c clusterConn, operator, host string, err error) error {
	e := trail.Entry{Time: time.Now(), Kind: trail.KindOperator, Subject: operator, Action: "forget-host",
		Outcome: trail.Done, Reason: "host " + host}
	if err != nil {
		e.Outcome, e.Reason = trail.Failed, "host "+host+": "+err.Error()
	}
	where, _ := os.Hostname()
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if perr := trail.Publish(pctx, c.js, c.inst, where, e); perr != nil {
		return fmt.Errorf("forget-host: the audit trail could not record it: %w", perr)
	}
	return nil
}
