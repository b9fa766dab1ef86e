package e2e

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"ticketrelay/testkit/e2eproc"
)

// load is a bounded set of clients that create tickets with unique
// request_ids and retry each one, with the same request_id and arguments, on
// a new session after any error, until it is answered or the deadline.
type load struct {
	url string

	mu       sync.Mutex
	answered map[string]createResult // request_id → the (last) successful answer
	fatal    []string                // answers that must never happen
	n        atomic.Int64            // requests answered
	retries  atomic.Int64            // failed attempts that were retried
	toolErrs atomic.Int64            // of which tool errors (isError)
	replays  atomic.Int64            // answers with replayed=true
}

func (l *load) failures() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.fatal...)
}

func (l *load) fail(format string, a ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.fatal = append(l.fatal, fmt.Sprintf(format, a...))
}

// run creates ids one after the other.
func (l *load) run(ctx context.Context, ids []string) {
	var cs *mcp.ClientSession
	defer func() {
		if cs != nil {
			cs.Close()
		}
	}()
	pause := func() bool {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(10 * time.Millisecond):
			return true
		}
	}
	for _, id := range ids {
		args := ticketArgs(id, "Load ticket "+id)
		for {
			if ctx.Err() != nil {
				return
			}
			if cs == nil {
				cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				s, err := e2eproc.Dial(cctx, l.url)
				cancel()
				if err != nil {
					if !pause() {
						return
					}
					continue
				}
				cs = s
			}
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			res, err := cs.CallTool(cctx, &mcp.CallToolParams{Name: createTool, Arguments: args})
			cancel()
			if err == nil && res.IsError {
				txt, _ := toolText(res)
				if strings.Contains(txt, "different arguments") {
					l.fail("%s: a retry with the same arguments was called a conflict: %s", id, txt)
					return
				}
				l.toolErrs.Add(1)
				err = errors.New(txt)
			}
			if err != nil {
				// A lost connection or a transient tool error: retry on a new session.
				l.retries.Add(1)
				cs.Close()
				cs = nil
				if !pause() {
					return
				}
				continue
			}
			var r createResult
			err = decodeResult(res, &r)
			if err == nil {
				err = checkCreateResult(r, id)
			}
			if err != nil {
				l.fail("%s: malformed answer: %v", id, err)
				return
			}
			l.mu.Lock()
			if prev, ok := l.answered[id]; ok && prev.TicketID != r.TicketID {
				l.fatal = append(l.fatal, fmt.Sprintf("%s answered ticket %s, then %s", id, prev.TicketID, r.TicketID))
			}
			l.answered[id] = r
			l.mu.Unlock()
			l.n.Add(1)
			if r.Replayed {
				l.replays.Add(1)
			}
			break
		}
	}
}

// Both processes crash under load: mcp-front by kill -9 after a third of the
// calls are answered, the dispatcher by a failpoint that SIGKILLs it between
// JetStream's ack of a batch and the marking of its outbox rows. Every
// answered request must reach the local target exactly once.
func TestCrashBothProcessesUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test: skipped in -short mode")
	}
	const workers, perWorker = 4, 60
	const total = workers * perWorker

	s := newStack(t)
	// A dispatcher that dies holds the messages its forwarder had pulled
	// until the consumer's AckWait (10 s, forwarder.Config.AckWait) runs
	// out; a short delivery timeout keeps the survivors' calls short too.
	s.dispArgs = []string{"-delivery-timeout", "2s"}
	d1 := s.startDispatcher(t, "TICKETRELAY_FAILPOINTS=relay.after-publish=kill@3")
	f1 := s.startFront(t, "127.0.0.1:0")
	port := portOf(t, f1.Addr("mcp"))

	began := time.Now()
	l := &load{url: s.url, answered: map[string]createResult{}}
	// loadDeadline only guarantees the test ends if the system hangs: the
	// load and the crashes take 2-3 s here, and how long they take is not
	// what this test checks (the outcome is), so it is far above that.
	const loadDeadline = 3 * time.Minute
	ctx, cancel := context.WithTimeout(context.Background(), loadDeadline)
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() }) // runs before the processes are stopped
	for w := range workers {
		ids := make([]string, perWorker)
		for i := range ids {
			ids[i] = fmt.Sprintf("crash-w%d-%03d", w, i)
		}
		wg.Go(func() { l.run(ctx, ids) })
	}
	loadDone := make(chan struct{})
	go func() { wg.Wait(); close(loadDone) }()
	// kill -9 mcp-front as soon as a third of the requests are answered.
	frontKilled := make(chan int64, 1)
	wg.Go(func() {
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			if n := l.n.Load(); n >= total/3 {
				f1.Kill9()
				frontKilled <- n
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	})

	// Supervise: restart mcp-front on the same port once it is killed, and
	// the dispatcher without the failpoint once it has killed itself. If the
	// relay happened to publish the whole load in fewer than 3 batches, a few
	// more single requests make the batches the failpoint waits for.
	var d2 *e2eproc.Proc
	frontRestarted, loadFinished, tail := false, false, 0
	for !loadFinished || !frontRestarted || d2 == nil {
		var d1done <-chan struct{}
		if d2 == nil {
			d1done = d1.Done()
		}
		select {
		case <-loadDone:
			loadFinished, loadDone = true, nil
		case n := <-frontKilled:
			<-f1.Done()
			if !f1.KilledBySIGKILL() {
				t.Fatalf("mcp-front was not killed by SIGKILL: %v", f1.Err())
			}
			s.startFront(t, "127.0.0.1:"+port)
			frontRestarted = true
			t.Logf("mcp-front killed with SIGKILL after %d of %d answers; restarted on port %s", n, total, port)
		case <-d1done:
			if !d1.KilledBySIGKILL() || !strings.Contains(d1.Log(), "failpoint relay.after-publish: SIGKILL") {
				t.Fatalf("the dispatcher exited, but not by its failpoint: %v", d1.Err())
			}
			d1.ExpectExit()
			t.Logf("the dispatcher killed itself after a JetStream ack (%d answers so far)", l.n.Load())
			d2 = s.startDispatcher(t)
		case <-ctx.Done():
			t.Fatalf("load not done after %s: %d answered, front restarted %v, dispatcher restarted %v",
				loadDeadline, l.n.Load(), frontRestarted, d2 != nil)
		case <-time.After(200 * time.Millisecond):
			if loadFinished && d2 == nil && frontRestarted {
				if tail++; tail > 50 {
					t.Fatalf("the dispatcher's failpoint never fired")
				}
				id := fmt.Sprintf("crash-tail-%03d", tail)
				l.run(ctx, []string{id})
			}
		}
		if len(l.failures()) > 0 {
			break
		}
	}
	if f := l.failures(); len(f) > 0 {
		t.Fatalf("%d wrong answers, first: %s", len(f), f[0])
	}
	if len(l.answered) != total+tail {
		t.Fatalf("%d of %d requests answered before the deadline", len(l.answered), total+tail)
	}
	t.Logf("load: %d answered in %s, %d replayed answers, %d retried attempts (%d tool errors)",
		len(l.answered), time.Since(began).Round(time.Millisecond), l.replays.Load(), l.retries.Load(), l.toolErrs.Load())

	ids := make([]string, 0, len(l.answered))
	for id := range l.answered {
		ids = append(ids, id)
	}
	cs := e2eproc.Connect(t, s.url)
	waitDelivered(t, cs, 30*time.Second, ids...)
	t.Logf("all delivered %s after the start of the load", time.Since(began).Round(time.Millisecond))

	// A request can be delivered before its outbox row is marked (the
	// dispatcher died between the ack and the mark, and its successor waits
	// out the lease before it republishes): wait for the marks, so that
	// everything has settled before the checks.
	db := openDB(t, s.db)
	waitFor(t, 15*time.Second, "every outbox row marked published", func() bool {
		var n int
		if err := db.QueryRow(`SELECT count(*) FROM outbox WHERE published_at IS NULL`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 0
	})

	// The local target: every answered key exactly once, no duplicate at all.
	lines := readJSONL(t, s.jsonl)
	seen := map[string]int{}
	for _, ln := range lines {
		seen[ln.Key]++
		if seen[ln.Key] == 2 {
			t.Errorf("tickets.jsonl: duplicate key %s", ln.Key)
		}
		if r, ok := l.answered[ln.Key]; !ok {
			t.Errorf("tickets.jsonl: key %s was never answered", ln.Key)
		} else if ln.Ticket.TicketID != r.TicketID {
			t.Errorf("tickets.jsonl: %s carries ticket %s, the client was answered %s", ln.Key, ln.Ticket.TicketID, r.TicketID)
		}
	}
	for _, id := range ids {
		if seen[id] != 1 {
			t.Errorf("tickets.jsonl has %d lines for answered request %s, want 1", seen[id], id)
		}
	}
	if len(lines) != len(ids) {
		t.Errorf("tickets.jsonl has %d lines, want %d", len(lines), len(ids))
	}

	// SQLite: every answered request has its ledger row, its ticket id and an
	// outbox row marked published.
	checkLedger(t, db, l.answered)
	c := countRows(t, db)
	if n := len(ids); c != (rowCounts{n, n, n}) {
		t.Errorf("rows (requests, tickets, outbox) = %+v, want %d of each", c, n)
	}

	// The republished batch was dropped by JetStream's duplicate window: the
	// new dispatcher saw duplicate acks, and the stream holds one message per
	// request.
	if got := scrape(t, d2).Get("ticketrelay_jetstream_duplicate_acks_total"); got <= 0 {
		t.Errorf("ticketrelay_jetstream_duplicate_acks_total = %v after the restart, want > 0", got)
	}
	waitFor(t, 5*time.Second, "ticketrelay_outbox_backlog 0", func() bool {
		return scrape(t, d2).Get("ticketrelay_outbox_backlog") == 0
	})
	if msgs := streamMsgs(t, s.dir, d2.Addr("nats")); msgs != uint64(c.requests) {
		t.Errorf("stream TICKETS holds %d messages, want %d (one per request)", msgs, c.requests)
	}
}

func checkLedger(t *testing.T, db *sql.DB, answered map[string]createResult) {
	t.Helper()
	rows, err := db.Query(`SELECT r.request_id, r.ticket_id, o.published_at
		FROM requests r LEFT JOIN outbox o ON o.request_id = r.request_id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	found := map[string]bool{}
	for rows.Next() {
		var id, ticketID string
		var pub sql.NullInt64
		if err := rows.Scan(&id, &ticketID, &pub); err != nil {
			t.Fatal(err)
		}
		found[id] = true
		r, ok := answered[id]
		switch {
		case !ok:
			t.Errorf("ledger: request %s was never answered", id)
		case ticketID != r.TicketID:
			t.Errorf("ledger: %s has ticket %s, the client was answered %s", id, ticketID, r.TicketID)
		}
		if !pub.Valid {
			t.Errorf("outbox: %s has no row, or one not marked published", id)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for id := range answered {
		if !found[id] {
			t.Errorf("ledger: answered request %s has no row", id)
		}
	}
}

// streamMsgs reports how many messages the TICKETS stream holds.
func streamMsgs(t *testing.T, dataDir, url string) uint64 {
	t.Helper()
	js := brokerJS(t, dataDir, url)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, "TICKETS")
	if err != nil {
		t.Fatalf("stream TICKETS: %v", err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatalf("stream TICKETS info: %v", err)
	}
	return info.State.Msgs
}
