package e2e

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"ticketrelay/testkit/e2eproc"
)

// The stream and the consumers are put back under a running dispatcher,
// and what the stream lost is published again: through the real processes
// and the JetStream API, as any holder of the broker's credential (or a
// broker that lost its store) could do it.

// repairs reads ticketrelay_stream_repairs_total{what}.
func repairs(t testing.TB, p *e2eproc.Proc, what string) float64 {
	t.Helper()
	return scrape(t, p).Get("ticketrelay_stream_repairs_total", "what", what)
}

// checkExactlyOnce fails t unless the local target holds each id once and
// nothing else.
func checkExactlyOnce(t *testing.T, s *stack, ids []string) {
	t.Helper()
	lines := readJSONL(t, s.jsonl)
	seen := map[string]int{}
	for _, ln := range lines {
		seen[ln.Key]++
	}
	for _, id := range ids {
		if seen[id] != 1 {
			t.Errorf("tickets.jsonl has %d lines for %s, want 1", seen[id], id)
		}
	}
	if len(lines) != len(ids) {
		t.Errorf("tickets.jsonl has %d lines, want %d", len(lines), len(ids))
	}
}

// Deleting the stream while tickets flow: the dispatcher creates it again
// within seconds, without a restart, and every ticket reaches the target
// exactly once.
func TestStreamDeletedUnderLoadIsPutBack(t *testing.T) {
	if testing.Short() {
		t.Skip("load test: skipped in -short mode")
	}
	const workers, perWorker = 4, 50
	const total = workers * perWorker
	s := newStack(t)
	disp := s.startDispatcher(t)
	s.startFront(t, "127.0.0.1:0")
	js := brokerJS(t, s.dir, disp.Addr("nats"))
	if got := repairs(t, disp, "stream_missing"); got != 0 {
		t.Fatalf("stream_missing repairs %v before anything happened", got)
	}

	l := &load{url: s.url, answered: map[string]createResult{}}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	var ids []string
	for w := range workers {
		batch := make([]string, perWorker)
		for i := range batch {
			batch[i] = fmt.Sprintf("del-w%d-%03d", w, i)
		}
		ids = append(ids, batch...)
		wg.Go(func() { l.run(ctx, batch) })
	}
	waitFor(t, time.Minute, "a third of the load answered", func() bool { return l.n.Load() >= total/3 })
	dctx, dcancel := context.WithTimeout(ctx, 10*time.Second)
	err := js.DeleteStream(dctx, "TICKETS")
	dcancel()
	if err != nil {
		t.Fatalf("delete the stream: %v", err)
	}
	deleted := time.Now()
	answeredAtDelete := l.n.Load()
	var back time.Duration
	waitFor(t, 15*time.Second, "the stream to be back", func() bool {
		sctx, scancel := context.WithTimeout(ctx, 2*time.Second)
		defer scancel()
		_, err := js.Stream(sctx, "TICKETS")
		if err == nil {
			back = time.Since(deleted)
			return true
		}
		if !errors.Is(err, jetstream.ErrStreamNotFound) {
			t.Logf("stream lookup: %v", err)
		}
		return false
	})
	t.Logf("stream deleted after %d of %d answers; back %s later", answeredAtDelete, total, back.Round(time.Millisecond))
	wg.Wait()
	if f := l.failures(); len(f) > 0 {
		t.Fatalf("%d wrong answers, first: %s", len(f), f[0])
	}
	if len(l.answered) != total {
		t.Fatalf("%d of %d requests answered", len(l.answered), total)
	}
	cs := e2eproc.Connect(t, s.url)
	waitDelivered(t, cs, time.Minute, ids...)
	t.Logf("all %d delivered %s after the delete", total, time.Since(deleted).Round(time.Millisecond))
	checkExactlyOnce(t, s, ids)
	if got := repairs(t, disp, "stream_missing"); got < 1 {
		t.Errorf("ticketrelay_stream_repairs_total{what=\"stream_missing\"} = %v, want >= 1", got)
	}
	if !contains(disp.Log(), "the stream was gone") {
		t.Errorf("no log line says the stream was gone and created again")
	}
}

// messagesWait starts a dispatcher that serves another target only, so
// that tickets for the local target are published and wait in the stream,
// and creates ids. It returns the dispatcher once every id is published.
func messagesWait(t *testing.T, s *stack, ids ...string) (*e2eproc.Proc, *sql.DB) {
	t.Helper()
	cfg := filepath.Join(s.dir, "other-target.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf("targets:\n  - {name: other, kind: local, options: {path: %q}}\n"+
		"tools:\n  - {name: create_other, target: other}\n", filepath.Join(s.dir, "other.jsonl"))), 0o644); err != nil {
		t.Fatal(err)
	}
	s.dispArgs = []string{"-config", cfg}
	disp := s.startDispatcher(t)
	s.startFront(t, "127.0.0.1:0")
	cs := e2eproc.Connect(t, s.url)
	for _, id := range ids {
		mustCreate(t, cs, ticketArgs(id, "waits in the stream"))
	}
	db := openDB(t, s.db)
	waitFor(t, 10*time.Second, "every ticket published", func() bool {
		var n int
		if err := db.QueryRow(`SELECT count(*) FROM outbox WHERE published_at IS NOT NULL AND stream_seq IS NOT NULL`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == len(ids)
	})
	return disp, db
}

// generations counts the outbox rows at generation g or above.
func generations(t *testing.T, db *sql.DB, g int) int {
	t.Helper()
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM outbox WHERE generation >= ? AND published_at IS NOT NULL`, g).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// A purge, then a delete, of a stream holding published messages no one
// has delivered yet: each time they are published again within seconds
// (not after the audit's -audit-after, 5 minutes here), and a dispatcher
// that serves their target then delivers each once.
func TestStreamPurgedOrDeletedIsPublishedAgain(t *testing.T) {
	s := newStack(t)
	ids := []string{"purged-1", "purged-2", "purged-3"}
	disp, db := messagesWait(t, s, ids...)
	js := brokerJS(t, s.dir, disp.Addr("nats"))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := js.Stream(ctx, "TICKETS")
	if err != nil {
		t.Fatal(err)
	}

	if err := st.Purge(ctx); err != nil {
		t.Fatalf("purge: %v", err)
	}
	purged := time.Now()
	waitFor(t, 15*time.Second, "the purged messages published again", func() bool { return generations(t, db, 1) == len(ids) })
	t.Logf("purge: republished %s later", time.Since(purged).Round(time.Millisecond))
	if info, err := st.Info(ctx); err != nil || info.State.Msgs != uint64(len(ids)) {
		t.Fatalf("after the purge the stream holds %v messages (%v), want %d", info.State.Msgs, err, len(ids))
	}
	if got := scrape(t, disp).Get("ticketrelay_stream_lost_messages_total"); got != float64(len(ids)) {
		t.Errorf("ticketrelay_stream_lost_messages_total = %v, want %d", got, len(ids))
	}
	if got := repairs(t, disp, "stream_lost"); got != 1 {
		t.Errorf("stream_lost repairs = %v, want 1", got)
	}

	if err := js.DeleteStream(ctx, "TICKETS"); err != nil {
		t.Fatalf("delete: %v", err)
	}
	deleted := time.Now()
	waitFor(t, 15*time.Second, "the deleted stream's messages published again", func() bool { return generations(t, db, 2) == len(ids) })
	t.Logf("delete: recreated and republished %s later", time.Since(deleted).Round(time.Millisecond))
	if got := repairs(t, disp, "stream_missing"); got != 1 {
		t.Errorf("stream_missing repairs = %v, want 1", got)
	}
	if got := scrape(t, disp).Get("ticketrelay_stream_lost_messages_total"); got != float64(2*len(ids)) {
		t.Errorf("ticketrelay_stream_lost_messages_total = %v, want %d", got, 2*len(ids))
	}
	// The stream holds each once, under its second redrive id.
	st, err = js.Stream(ctx, "TICKETS")
	if err != nil {
		t.Fatal(err)
	}
	if info, err := st.Info(ctx); err != nil || info.State.Msgs != uint64(len(ids)) {
		t.Fatalf("after the delete the stream holds %v messages (%v), want %d", info.State.Msgs, err, len(ids))
	}

	// A dispatcher that serves the local target delivers each once.
	disp.Stop(t)
	s.dispArgs = nil
	s.startDispatcher(t)
	cs := e2eproc.Connect(t, s.url)
	waitDelivered(t, cs, 30*time.Second, ids...)
	checkExactlyOnce(t, s, ids)
}

// A deleted consumer is created again, and one whose configuration was
// changed is set back, as is the stream's configuration; tickets keep
// reaching the target once each.
func TestConsumerAndConfigurationArePutBack(t *testing.T) {
	s := startStack(t)
	disp := s.disp
	cs := e2eproc.Connect(t, s.url)
	js := brokerJS(t, s.dir, disp.Addr("nats"))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	mustCreate(t, cs, ticketArgs("cons-1", "before"))
	waitDelivered(t, cs, 20*time.Second, "cons-1")

	if err := js.DeleteConsumer(ctx, "TICKETS", "deliver-local"); err != nil {
		t.Fatalf("delete the consumer: %v", err)
	}
	deleted := time.Now()
	waitFor(t, 15*time.Second, "the consumer created again", func() bool { return repairs(t, disp, "consumer_missing") == 1 })
	t.Logf("consumer back %s after its deletion", time.Since(deleted).Round(time.Millisecond))
	mustCreate(t, cs, ticketArgs("cons-2", "after the consumer's deletion"))
	waitDelivered(t, cs, 20*time.Second, "cons-2")

	// Change the consumer's and the stream's configuration.
	cons, err := js.Consumer(ctx, "TICKETS", "deliver-local")
	if err != nil {
		t.Fatal(err)
	}
	cc := cons.CachedInfo().Config
	cc.MaxAckPending = 1
	cc.Description = "changed by someone else"
	if _, err := js.UpdateConsumer(ctx, "TICKETS", cc); err != nil {
		t.Fatalf("change the consumer: %v", err)
	}
	st, err := js.Stream(ctx, "TICKETS")
	if err != nil {
		t.Fatal(err)
	}
	sc := st.CachedInfo().Config
	sc.MaxMsgs = 1
	if _, err := js.UpdateStream(ctx, sc); err != nil {
		t.Fatalf("change the stream: %v", err)
	}
	waitFor(t, 15*time.Second, "both configurations set back", func() bool {
		return repairs(t, disp, "consumer_config") == 1 && repairs(t, disp, "stream_config") == 1
	})
	if info, err := cons.Info(ctx); err != nil || info.Config.MaxAckPending == 1 {
		t.Fatalf("consumer MaxAckPending %d (%v) after the repair", info.Config.MaxAckPending, err)
	}
	if info, err := st.Info(ctx); err != nil || info.Config.MaxMsgs != -1 {
		t.Fatalf("stream MaxMsgs %d (%v) after the repair, want -1", info.Config.MaxMsgs, err)
	}
	mustCreate(t, cs, ticketArgs("cons-3", "after the configuration changes"))
	waitDelivered(t, cs, 20*time.Second, "cons-3")
	checkExactlyOnce(t, s, []string{"cons-1", "cons-2", "cons-3"})
	// Nothing was repaired that was not broken.
	if got := repairs(t, disp, "stream_missing"); got != 0 {
		t.Errorf("stream_missing repairs = %v, want 0", got)
	}
}
