package powercut_test

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	_ "modernc.org/sqlite"

	"ticketrelay/metrics"
	"ticketrelay/store"
	"ticketrelay/store/ledger"
	"ticketrelay/store/sqlitedb"
	"ticketrelay/testkit/powercut"
	"ticketrelay/ticket"
)

// childLedger is mcp-front's durable path without the MCP layer: the real
// ledger on POWERCUT_DB, 8 callers creating tickets concurrently (so that
// the writer commits them in groups), each creation printed as
// "ack <request_id>" once Create has returned it. It runs until killed.
func childLedger() int {
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	db, err := store.Open(ctx, os.Getenv("POWERCUT_DB"))
	if err != nil {
		log.Error("open", "err", err)
		return 1
	}
	w := sqlitedb.NewWriter(db, log, metrics.NewFront(prometheus.NewRegistry()).Writer)
	l := ledger.New(db, w, time.Now)
	prefix := os.Getenv("POWERCUT_PREFIX")
	var out sync.Mutex
	var wg sync.WaitGroup
	for worker := range 8 {
		wg.Go(func() {
			// Bounded; the parent kills the child long before.
			for i := range 100_000 {
				req := ledgerRequest(fmt.Sprintf("%s-w%d-%06d", prefix, worker, i))
				if _, err := l.Create(ctx, req); err != nil {
					log.Error("create", "request_id", req.RequestID, "err", err)
					os.Exit(1)
				}
				out.Lock()
				fmt.Fprintf(os.Stdout, "ack %s\n", req.RequestID)
				out.Unlock()
			}
		})
	}
	wg.Wait()
	return 0
}

func ledgerRequest(id string) ticket.Request {
	r := ticket.Request{
		RequestID: id,
		Tool:      "create_ticket",
		Target:    "local",
		Title:     "Disk full on db-1",
		Body:      "df shows 100%\nsince 09:00",
		Priority:  "urgent",
		Labels:    []string{"ops", "disk"},
	}
	if err := r.Normalize(); err != nil {
		panic(err)
	}
	return r
}

// TestLedgerSurvivesPowerCut: tickets acknowledged by the real ledger
// (SQLite, WAL, synchronous=FULL) are all there after the process is
// SIGKILLed in the middle of its writes and the machine loses power, and
// the database is intact. Three rounds on the same database.
func TestLedgerSurvivesPowerCut(t *testing.T) {
	pc := powercut.MountT(t, powercut.Options{})
	db := filepath.Join(pc.Mountpoint(), "tickets.db")
	acked := map[string]bool{}
	for round := range 3 {
		c := startChild(t, "ledger", "POWERCUT_DB="+db, fmt.Sprintf("POWERCUT_PREFIX=r%d", round))
		start := time.Now()
		want := 500 + 250*round
		for n := 0; n < want; n++ {
			acked[ackID(t, c.next(t, time.Minute))] = true
		}
		elapsed := time.Since(start)
		for _, l := range c.kill() {
			acked[ackID(t, l)] = true
		}
		if err := pc.Cut(); err != nil {
			t.Fatal(err)
		}
		st := pc.Stats()
		t.Logf("round %d: %d acknowledged in total (%d in %s), fsyncs %d files / %d directories so far; cut: %+v",
			round, len(acked), want, elapsed.Round(time.Millisecond), st.FileSyncs, st.DirSyncs, st.LastCut)
		if st.LastCut.FilesReverted == 0 {
			t.Errorf("round %d: the cut reverted no file: SQLite's -shm is never synced, so something should have been", round)
		}
		checkLedger(t, db, acked)
	}
}

func ackID(t *testing.T, line string) string {
	t.Helper()
	id, ok := strings.CutPrefix(line, "ack ")
	if !ok {
		t.Fatalf("child wrote %q", line)
	}
	return id
}

// checkLedger runs childCheckLedger on the database and checks its integrity
// and that every acknowledged request is in it. (Not in this process:
// SQLite maps the -shm file, and a page fault on the mount from the process
// that serves it can deadlock with the garbage collector.)
func checkLedger(t *testing.T, path string, acked map[string]bool) {
	t.Helper()
	c := startChild(t, "ledger-check", "POWERCUT_DB="+path)
	have := map[string]bool{}
	integrity, outbox := "", -1
	for l := range c.lines {
		switch k, v, _ := strings.Cut(l, " "); k {
		case "id":
			have[v] = true
		case "integrity":
			integrity = v
		case "outbox":
			fmt.Sscan(v, &outbox)
		case "error":
			t.Fatalf("checking the ledger after the cut: %s", v)
		}
	}
	if err := c.cmd.Wait(); err != nil {
		t.Fatalf("ledger check: %v\n%s", err, c.stderr.String())
	}
	if integrity != "ok" {
		t.Fatalf("integrity_check after the cut: %q", integrity)
	}
	var lost []string
	for id := range acked {
		if !have[id] {
			lost = append(lost, id)
		}
	}
	if len(lost) > 0 {
		t.Fatalf("%d of %d acknowledged requests lost by the cut (e.g. %v); %d rows in the ledger",
			len(lost), len(acked), lost[:min(5, len(lost))], len(have))
	}
	if outbox < len(acked) {
		t.Fatalf("%d outbox rows for %d acknowledged requests", outbox, len(acked))
	}
	t.Logf("ledger after the cut: %d rows, %d outbox rows, all %d acknowledged present, integrity ok", len(have), outbox, len(acked))
}

// childCheckLedger opens POWERCUT_DB as mcp-front does after a restart
// (ledger.Open: recovery, migrations), then prints "integrity <result of
// PRAGMA integrity_check>", "outbox <rows>" and "id <request_id>" for each
// ledger row; "error <text>" if something fails.
func childCheckLedger() int {
	fail := func(err error) int {
		fmt.Printf("error %v\n", err)
		return 1
	}
	path := os.Getenv("POWERCUT_DB")
	db, err := store.Open(context.Background(), path)
	if err != nil {
		return fail(fmt.Errorf("ledger.Open: %w", err))
	}
	if err := db.Close(); err != nil {
		return fail(err)
	}
	raw, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)")
	if err != nil {
		return fail(err)
	}
	defer raw.Close()
	var integrity string
	if err := raw.QueryRow(`PRAGMA integrity_check`).Scan(&integrity); err != nil {
		return fail(err)
	}
	fmt.Printf("integrity %s\n", integrity)
	var outbox int
	if err := raw.QueryRow(`SELECT count(*) FROM outbox`).Scan(&outbox); err != nil {
		return fail(err)
	}
	fmt.Printf("outbox %d\n", outbox)
	rows, err := raw.Query(`SELECT request_id FROM requests`)
	if err != nil {
		return fail(err)
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return fail(err)
		}
		fmt.Printf("id %s\n", id)
	}
	if err := rows.Err(); err != nil {
		return fail(err)
	}
	return 0
}
