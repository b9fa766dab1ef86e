package e2e

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"ticketrelay/testkit/e2eproc"
)

// A message JetStream loses after acknowledging it, before any delivery, is
// found by the dispatcher's audit and published again; the ticket then
// reaches its target once.
//
// The first dispatcher has no consumer for the local target (its
// configuration names another target), so the published message waits in
// the stream; the test deletes it there, as a broker that lost it would.
// The audit republishes it under its redrive id. A dispatcher with the local
// target then delivers it.
func TestAuditRepublishesAMessageTheStreamLost(t *testing.T) {
	s := newStack(t)
	s.dispArgs = []string{"-audit-after", "1s", "-delivery-timeout", "500ms"}
	cfg := filepath.Join(s.dir, "other-target.yaml")
	// The path is absolute: a relative one resolves against the dispatcher's
	// working directory, which under go test is this source directory.
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf("targets:\n  - {name: other, kind: local, options: {path: %q}}\n"+
		"tools:\n  - {name: create_other, target: other}\n", filepath.Join(s.dir, "other.jsonl"))), 0o644); err != nil {
		t.Fatal(err)
	}
	s.dispArgs = append(s.dispArgs, "-config", cfg)
	disp := s.startDispatcher(t)
	s.startFront(t, "127.0.0.1:0")
	cs := e2eproc.Connect(t, s.url)
	const id = "3f0c9a52-audit-lost-message"
	created := mustCreate(t, cs, ticketArgs(id, "lost by the broker"))

	db, err := sql.Open("sqlite", "file:"+s.db+"?mode=ro&_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	var seq, generation int64
	published := func() bool {
		var at sql.NullInt64
		var sq sql.NullInt64
		if err := db.QueryRow(`SELECT published_at, stream_seq, generation FROM outbox WHERE request_id = ?`, id).
			Scan(&at, &sq, &generation); err != nil {
			t.Fatal(err)
		}
		seq = sq.Int64
		return at.Valid && sq.Valid
	}
	waitFor(t, 10*time.Second, "the message published with its stream sequence", published)
	if generation != 0 {
		t.Fatalf("generation %d before any loss", generation)
	}

	// The broker loses it.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	js := brokerJS(t, s.dir, disp.Addr("nats"))
	st, err := js.Stream(ctx, "TICKETS")
	if err != nil {
		t.Fatal(err)
	}
	lostSeq := uint64(seq)
	if err := st.DeleteMsg(ctx, lostSeq); err != nil {
		t.Fatal(err)
	}

	waitFor(t, 15*time.Second, "the audit to count the lost message", func() bool {
		return scrape(t, disp).Get("ticketrelay_stream_lost_messages_total") == 1
	})
	waitFor(t, 10*time.Second, "the message published again", func() bool { return published() && generation == 1 })
	m, err := st.GetMsg(ctx, uint64(seq))
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Header.Get(jetstream.MsgIDHeader); got != id+"#redrive-1" || uint64(seq) == lostSeq {
		t.Fatalf("republished as %q at %d (lost at %d), want %s#redrive-1 at a new sequence", got, seq, lostSeq, id)
	}

	// A dispatcher with the local target delivers it, once.
	disp.Stop(t)
	s.dispArgs = []string{"-audit-after", "1s", "-delivery-timeout", "500ms"}
	s.startDispatcher(t)
	waitDelivered(t, cs, 20*time.Second, id)
	checkOneLine(t, s, id, created.TicketID)
	if got := scrape(t, s.disp).Get("ticketrelay_stream_lost_messages_total"); got != 0 {
		t.Errorf("the second dispatcher counted %v lost messages, want 0", got)
	}
}
