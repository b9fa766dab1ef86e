package trail_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"ticketrelay/store"
	"ticketrelay/store/trail"
	"ticketrelay/testkit/testwait"
)

// openStore opens a fresh database the way both processes do: the ledger
// migrates it, the trail opens beside it.
func openStore(t testing.TB) (*trail.Store, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "tickets.db")
	db, err := store.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	s, err := trail.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, path
}

var quiet = slog.New(slog.DiscardHandler)

func call(at time.Time, subject, tool, id, outcome string) trail.Entry {
	return trail.Entry{Time: at, Kind: trail.KindCall, Subject: subject, Tool: tool, RequestID: id, Outcome: outcome}
}

// The table is append-only, queries filter on every field, ForRequest
// returns a request's entries in order, Prune removes only what is older
// than its cutoff, and seqs are never reused after everything was pruned.
func TestStore(t *testing.T) {
	s, path := openStore(t)
	ctx := context.Background()
	t0 := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	entries := []trail.Entry{
		call(t0, "alice", "create_ticket", "alice:r1", trail.Accepted),
		call(t0.Add(time.Minute), "alice", "create_ticket", "alice:r1", trail.Replayed),
		call(t0.Add(2*time.Minute), "bob", "find_request", "bob:r2", trail.OK),
		{Time: t0.Add(3 * time.Minute), Kind: trail.KindOperator, Subject: "os:root", Action: "redrive", RequestID: "alice:r1", Outcome: trail.Done},
	}
	if _, err := s.Append(ctx, entries[:2]); err != nil {
		t.Fatal(err)
	}
	last, err := s.Append(ctx, entries[2:])
	if err != nil {
		t.Fatal(err)
	}
	all, err := s.Query(ctx, trail.Filter{})
	if err != nil || len(all) != 4 || all[3].Seq != last {
		t.Fatalf("Query: %+v, %v; want 4 entries, the last with seq %d", all, err, last)
	}
	seq := func(i int) int64 { return all[i].Seq }
	for i := 1; i < 4; i++ {
		if seq(i) <= seq(i-1) {
			t.Errorf("seqs not increasing: %d after %d", seq(i), seq(i-1))
		}
	}
	for name, c := range map[string]struct {
		f    trail.Filter
		want []int
	}{
		"all":     {trail.Filter{}, []int{0, 1, 2, 3}},
		"subject": {trail.Filter{Subject: "alice"}, []int{0, 1}},
		"tool":    {trail.Filter{Name: "find_request"}, []int{2}},
		"action":  {trail.Filter{Name: "redrive"}, []int{3}},
		"outcome": {trail.Filter{Outcome: trail.Replayed}, []int{1}},
		"since":   {trail.Filter{Since: t0.Add(time.Minute)}, []int{1, 2, 3}},
		"until":   {trail.Filter{Until: t0.Add(time.Minute)}, []int{0}},
		"after":   {trail.Filter{AfterSeq: seq(0), Limit: 1}, []int{1}},
		"after2":  {trail.Filter{AfterSeq: seq(1)}, []int{2, 3}},
	} {
		got, err := s.Query(ctx, c.f)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var seqs, want []int64
		for _, e := range got {
			seqs = append(seqs, e.Seq)
		}
		for _, i := range c.want {
			want = append(want, seq(i))
		}
		if fmt.Sprint(seqs) != fmt.Sprint(want) {
			t.Errorf("%s: seqs %v, want %v", name, seqs, want)
		}
	}
	got, err := s.ForRequest(ctx, "alice:r1")
	if err != nil || len(got) != 3 || got[0].Outcome != trail.Accepted || got[2].Action != "redrive" || !got[0].Time.Equal(t0) {
		t.Errorf("ForRequest: %+v, %v", got, err)
	}

	// Append-only: an UPDATE is refused by the database itself.
	raw, err := openRaw(path)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	if _, err := raw.Exec(`UPDATE trail SET entries = '' WHERE seq = 1`); err == nil || !strings.Contains(err.Error(), "append-only") {
		t.Errorf("UPDATE of an entry: %v; want it refused as append-only", err)
	}

	// An invalid entry refuses the whole batch.
	if _, err := s.Append(ctx, []trail.Entry{call(t0, "x", "t", "", trail.OK), {Time: t0, Kind: "call"}}); err == nil {
		t.Error("Append took an entry without an outcome")
	}
	if n, _ := s.Query(ctx, trail.Filter{}); len(n) != 4 {
		t.Errorf("a refused batch wrote: %d entries", len(n))
	}

	// Retention removes a stored batch once all its entries are past the
	// cutoff: the second batch (3 and 4) stays while its last is not.
	n, err := s.PruneBefore(ctx, t0.Add(150*time.Second))
	if err != nil || n != 1 {
		t.Errorf("PruneBefore: %d rows, %v; want 1", n, err)
	}
	if got, _ := s.Query(ctx, trail.Filter{}); len(got) != 2 || got[0].Seq != seq(2) {
		t.Errorf("after pruning: %+v", got)
	}
	if n, _ := s.PruneBefore(ctx, t0.Add(time.Hour)); n != 1 {
		t.Errorf("PruneBefore everything: %d, want 1", n)
	}
	next, err := s.Append(ctx, []trail.Entry{call(t0, "c", "find_request", "", trail.OK)})
	if err != nil || next <= last {
		t.Errorf("the first entry after pruning everything has seq %d (%v), after %d: a sink resuming after %d would skip a reused one", next, err, last, last)
	}
}

// Fields a caller controls are cut to their bounds and made valid UTF-8.
func TestEntryClean(t *testing.T) {
	e := trail.Entry{Client: strings.Repeat("x", 1000), Tool: "bad\xffname", Reason: strings.Repeat("r", 1000)}.Clean()
	if len(e.Client) != 128 || len(e.Reason) != 256 || e.Tool != "bad\uFFFDname" {
		t.Errorf("Clean: client %d bytes, reason %d, tool %q", len(e.Client), len(e.Reason), e.Tool)
	}
}

// The writer stores what it is given in order, and Close writes what is
// still queued; with its queue full it drops entries without blocking and
// notes the gap in the trail itself.
func TestWriterDropsAndNotes(t *testing.T) {
	s, _ := openStore(t)
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	w := trail.NewWriter(s, trail.WriterConfig{Queue: 4, Linger: time.Hour}, quiet, time.Now, reg)
	t0 := time.Now()
	var full int
	for i := range 10 {
		if err := w.Record(ctx, call(t0, "s", "create_ticket", fmt.Sprintf("r%d", i), trail.Accepted)); errors.Is(err, trail.ErrQueueFull) {
			full++
		} else if err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Record(ctx, trail.Entry{Time: t0, Kind: trail.KindCall}); err == nil {
		t.Error("Record took an entry without an outcome")
	}
	// The writer holds the first entry while it lingers; up to 4 wait in
	// the queue, the rest are dropped.
	if full < 5 || full > 6 {
		t.Fatalf("%d of 10 records refused with a queue of 4; want 5 or 6", full)
	}
	w.Close()
	if err := w.Record(ctx, call(t0, "s", "t", "", trail.OK)); !errors.Is(err, trail.ErrClosed) {
		t.Errorf("Record after Close: %v", err)
	}
	got, err := s.Query(ctx, trail.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 10-full+1 {
		t.Fatalf("%d entries stored; want %d and a note", len(got), 10-full)
	}
	for i, e := range got[:len(got)-1] {
		if e.RequestID != fmt.Sprintf("r%d", i) {
			t.Errorf("entry %d is %s: out of order", i, e.RequestID)
		}
	}
	note := got[len(got)-1]
	if note.Kind != trail.KindTrail || note.Outcome != trail.Dropped || !strings.HasPrefix(note.Reason, fmt.Sprintf("%d entries not recorded", full)) {
		t.Errorf("the note of the dropped entries: %+v", note)
	}
	if v := metricValue(t, reg, "ticketrelay_trail_dropped_total"); v != float64(full) {
		t.Errorf("ticketrelay_trail_dropped_total = %v, want %d", v, full)
	}
}

func metricValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

func openRaw(path string) (*sql.DB, error) { return sql.Open("sqlite", path) }

// readLines reads the JSON lines of the sink's file.
func readLines(t *testing.T, path string) []trail.Entry {
	t.Helper()
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	// Only whole lines: a fragment after the last newline is a line being
	// written (or one a crash cut short, which the sink cuts off when it
	// resumes); a fragment the sink wrote after would spoil the next line.
	lines := bytes.Split(b, []byte("\n"))
	var out []trail.Entry
	for _, line := range lines[:len(lines)-1] {
		var e trail.Entry
		if err := json.Unmarshal(line, &e); err != nil {
			t.Fatalf("%s: line %q: %v", path, line, err)
		}
		out = append(out, e)
	}
	return out
}

// runSink runs a file sink until the returned stop is called.
func runSink(t *testing.T, s *trail.Store, path string) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- (&trail.FileSink{Store: s, Path: path, Every: 10 * time.Millisecond, Log: quiet}).Run(ctx)
	}()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("file sink: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("file sink did not stop")
		}
	}
	t.Cleanup(stop)
	return stop
}

func appendN(t *testing.T, s *trail.Store, from, n int) {
	t.Helper()
	var batch []trail.Entry
	for i := from; i < from+n; i++ {
		batch = append(batch, call(time.Now(), "s", "create_ticket", fmt.Sprintf("r%d", i), trail.Accepted))
	}
	if _, err := s.Append(context.Background(), batch); err != nil {
		t.Fatal(err)
	}
}

// seqsAre fails unless the file holds exactly the store's entries from
// the from-th to the to-th (1-based, inclusive), once each, in order.
func seqsAre(t *testing.T, s *trail.Store, got []trail.Entry, from, to int) {
	t.Helper()
	all, err := s.Query(context.Background(), trail.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	want := all[from-1 : to]
	if len(got) != len(want) {
		t.Fatalf("%d lines, want entries %d..%d", len(got), from, to)
	}
	for i, e := range got {
		if e.Seq != want[i].Seq {
			t.Fatalf("line %d has seq %d, want %d (lost or duplicated)", i, e.Seq, want[i].Seq)
		}
	}
}

// The file sink resumes after a restart without losing or repeating a
// line, also after a crash cut its last line short, and follows a rotation
// by rename: the new file starts where the old one stopped.
func TestFileSinkResumes(t *testing.T) {
	s, _ := openStore(t)
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	appendN(t, s, 0, 1500) // more than one batch
	stop := runSink(t, s, path)
	testwait.For(t, 10*time.Second, "1500 lines in the file", func() bool { return len(readLines(t, path)) == 1500 })
	stop()
	seqsAre(t, s, readLines(t, path), 1, 1500)

	// Stopped: new entries, and a line cut short as by a crash mid-write.
	appendN(t, s, 1500, 5)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(f, `{"seq":99999999,"time":"2026-`); err != nil {
		t.Fatal(err)
	}
	f.Close()
	stop = runSink(t, s, path)
	testwait.For(t, 10*time.Second, "1505 lines", func() bool { return len(readLines(t, path)) >= 1505 })
	seqsAre(t, s, readLines(t, path), 1, 1505)

	// Rotated by rename while running: the sink reopens the path.
	rotated := path + ".1"
	if err := os.Rename(path, rotated); err != nil {
		t.Fatal(err)
	}
	appendN(t, s, 1505, 3)
	testwait.For(t, 10*time.Second, "the new file", func() bool { return len(readLines(t, path)) >= 3 })
	seqsAre(t, s, readLines(t, path), 1506, 1508)
	seqsAre(t, s, readLines(t, rotated), 1, 1505)
	stop()

	// Rotated while stopped (the file is gone): the cursor says where to go on.
	if err := os.Rename(path, path+".2"); err != nil {
		t.Fatal(err)
	}
	appendN(t, s, 1508, 2)
	runSink(t, s, path)
	testwait.For(t, 10*time.Second, "the file after a rotation while stopped", func() bool { return len(readLines(t, path)) >= 2 })
	seqsAre(t, s, readLines(t, path), 1509, 1510)
}

// A file whose last line is no entry of ours is refused, not overwritten.
func TestFileSinkRefusesForeignFile(t *testing.T) {
	s, _ := openStore(t)
	path := filepath.Join(t.TempDir(), "other.log")
	if err := os.WriteFile(path, []byte("some other log line\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	err := (&trail.FileSink{Store: s, Path: path, Log: quiet}).Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), "no trail entry") {
		t.Errorf("Run on a foreign file: %v", err)
	}
	if b, _ := os.ReadFile(path); string(b) != "some other log line\n" {
		t.Errorf("the foreign file changed: %q", b)
	}
}
