package clusterrec_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"ticketrelay/delivery/natsjs"
	"ticketrelay/request"
	"ticketrelay/store/clusterrec"
	"ticketrelay/store/ledger"
	"ticketrelay/store/trail"
	"ticketrelay/testkit/testwait"
	"ticketrelay/ticket"
)

// The console's copy of the installation on host B: a request accepted on
// host A shows in B's list with A as its holder, each delivery record
// write as an attempt by the host that wrote it, and A's audit entries
// naming it; the copy is current while the stream answers, and a stopped
// copy resumes from its cursor without reading the stream again.
func TestCopyFoldsAnotherHostsRequests(t *testing.T) {
	ctx := ctxT(t)
	js := embeddedJS(t)
	a, b := newHost(t, js, "host-a", clusterrec.Config{}), newHost(t, js, "host-b", clusterrec.Config{})
	if _, err := trail.EnsureStream(ctx, js, "test", 1, time.Hour); err != nil {
		t.Fatal(err)
	}
	cctx, stop := context.WithCancel(ctx)
	cp := clusterrec.NewCopy(b.store, js, b.l, discard(), time.Now)
	done := make(chan struct{})
	go func() { defer close(done); cp.Run(cctx, clusterrec.CopyConfig{Wait: 100 * time.Millisecond}) }()

	res, err := a.front.Create(ctx, newRequest("req-1", "Disk full on db-1"))
	if err != nil {
		t.Fatal(err)
	}
	scoped := ticket.ScopedID("", "req-1")
	all := func() ledger.RequestPage {
		p, err := b.l.ListCluster(ctx, ledger.RequestFilter{Limit: 50})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	testwait.For(t, 20*time.Second, "host B's copy lists host A's request", func() bool { return len(all().Rows) == 1 })
	if r := all().Rows[0]; r.RequestID != scoped || r.Host != "host-a" || r.State != ledger.ListWaiting || r.Title != "Disk full on db-1" || r.TicketID != res.TicketID {
		t.Fatalf("host B's copy: %+v; want %s held by host-a, waiting", r, scoped)
	}
	if local, _ := b.l.ListRequests(ctx, ledger.RequestFilter{Limit: 50}); len(local.Rows) != 0 {
		t.Fatalf("host B's own ledger lists %d requests; the premise is that only A's holds it", len(local.Rows))
	}

	// Host B's forwarder fails once, host A's delivers.
	rec := request.Delivery{RequestID: scoped, Target: "local", State: string(request.StatusRetrying), Attempts: 1, LastError: "HTTP 503"}
	if err := b.deliv.RecordDelivery(ctx, rec); err != nil {
		t.Fatal(err)
	}
	rec.Version, rec.State, rec.Attempts, rec.LastError, rec.ExternalID = 1, string(request.StatusDelivered), 2, "", "T-9"
	if err := a.deliv.RecordDelivery(ctx, rec); err != nil {
		t.Fatal(err)
	}
	if err := trail.Publish(ctx, js, "test", "host-a", trail.Entry{Time: time.Now(), Kind: trail.KindOperator, Subject: "ada",
		Action: "redrive", RequestID: scoped, Outcome: trail.Done}); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 20*time.Second, "host B's copy sees the delivery and A's audit entry", func() bool {
		d, err := b.l.ListCluster(ctx, ledger.RequestFilter{Status: string(request.StatusDelivered), Limit: 50})
		e, err2 := b.l.ClusterTrail(ctx, scoped)
		return err == nil && err2 == nil && len(d.Rows) == 1 && len(e) == 1
	})
	attempts, err := b.l.ClusterAttempts(ctx, scoped)
	if err != nil || len(attempts) != 2 || attempts[0].Host != "host-b" || attempts[0].Outcome != "retrying" || attempts[0].Error != "HTTP 503" ||
		attempts[1].Host != "host-a" || attempts[1].Outcome != "delivered" {
		t.Fatalf("attempts in host B's copy: %+v, %v; want B's retry then A's delivery", attempts, err)
	}
	row, found, err := b.l.ClusterRequest(ctx, scoped)
	if err != nil || !found || row.Delivery == nil || row.Delivery.ExternalID != "T-9" || row.By != "host-a" {
		t.Fatalf("host B's copy of the request: %+v %v %v", row, found, err)
	}
	testwait.For(t, 10*time.Second, "the copy says it is current", func() bool { r, _ := cp.State(); return r.Current(time.Now()) })

	stop()
	<-done
	cursor, err := b.l.ClusterCursor(ctx, request.CopyRecords)
	if err != nil || cursor == 0 {
		t.Fatalf("the copy's cursor after a stop: %d, %v", cursor, err)
	}
	if _, err := a.front.Create(ctx, newRequest("req-2", "Second")); err != nil {
		t.Fatal(err)
	}
	cp = clusterrec.NewCopy(b.store, js, b.l, discard(), time.Now)
	cctx, stop = context.WithCancel(ctx)
	defer stop()
	go cp.Run(cctx, clusterrec.CopyConfig{Wait: 100 * time.Millisecond})
	testwait.For(t, 20*time.Second, "the restarted copy folds the new request", func() bool { return len(all().Rows) == 2 })
	if p := all(); p.Rows[0].RequestID != ticket.ScopedID("", "req-2") || p.Rows[1].State != string(request.StatusDelivered) {
		t.Fatalf("after the restart: %+v", p.Rows)
	}
}

// A copy whose server stops answering is no longer current: the console
// then says so rather than show the copy as fresh.
func TestCopyNotCurrentWhenTheServerIsGone(t *testing.T) {
	ctx := ctxT(t)
	ns, err := natsjs.StartEmbedded(natsjs.EmbeddedConfig{Listen: "127.0.0.1:0", StoreDir: filepath.Join(t.TempDir(), "nats")}, discard())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	js := connectJS(t, ns.ClientURL())
	b := newHost(t, js, "host-b", clusterrec.Config{})
	if _, err := trail.EnsureStream(ctx, js, "test", 1, time.Hour); err != nil {
		t.Fatal(err)
	}
	cp := clusterrec.NewCopy(b.store, js, b.l, discard(), time.Now)
	go cp.Run(ctx, clusterrec.CopyConfig{Wait: 100 * time.Millisecond})
	testwait.For(t, 10*time.Second, "the copy is current", func() bool { r, _ := cp.State(); return r.Current(time.Now()) })
	ns.Shutdown()
	ns.WaitForShutdown()
	testwait.For(t, clusterrec.StaleAfter+20*time.Second, "the copy is no longer current", func() bool {
		r, tr := cp.State()
		return !r.Current(time.Now()) && !tr.Current(time.Now())
	})
	if r, _ := cp.State(); r.Checked.IsZero() {
		t.Fatalf("the copy's state after the server went: %+v; want the last time it answered", r)
	}
}
