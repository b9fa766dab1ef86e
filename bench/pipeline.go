package bench

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"ticketrelay/delivery/downstream/local"
)

// memoryTarget is the peak RSS each process is held to (issues 6 and 22).
const memoryTarget = 60 << 20

// scenario7 runs scenario 1's create_ticket at n sessions with the
// dispatcher beside mcp-front (relaying and delivering to the local target)
// and reports the peak RSS of both.
func (r *runner) scenario7(ctx context.Context, n int) error {
	dir, err := r.mkdir("s7")
	if err != nil {
		return err
	}
	disp, front, fs, stop, err := r.startPipeline(ctx, dir, n)
	if err != nil {
		return err
	}
	defer stop()
	// As long a create_ticket load as scenario 1's at this session count:
	// a warm-up and every round.
	if err := r.warm(ctx, fs, createTool); err != nil {
		return err
	}
	o := &outcome{}
	for range r.cfg.Rounds {
		o1, err := fs.run(ctx, r.timed(createTool, &freshSource{}, front, disp))
		if err != nil {
			return err
		}
		o.merge(o1)
	}
	r.s7 = o.throughput()
	rssF, err := front.peakRSS()
	if err != nil {
		return err
	}
	rssD, err := disp.peakRSS()
	if err != nil {
		return err
	}
	settings := fmt.Sprintf("create_ticket, %d sessions, as long as scenario 1's create_ticket load (%s warm-up, %d×(%s+%s) rounds), dispatcher relaying and delivering alongside",
		n, r.cfg.Warmup, r.cfg.Rounds, r.cfg.Settle, r.cfg.Measure)
	if s1 := r.s1[n]; s1 != nil && s1.frontRSS > 0 {
		r.rep.detail("7 peak RSS of the mcp-front of scenarios 1-3 at %d sessions over its whole block, which also served the benchmark-only no-op twin "+
			"at %s and the replays: %s", n, perSec(s1.noop.throughput()), mib(s1.frontRSS))
	}
	for _, x := range []struct {
		name string
		rss  int64
	}{{"mcp-front", rssF}, {"dispatcher", rssD}} {
		result := verdict(x.rss <= memoryTarget)
		if o.errors > 0 {
			result = "ERR"
		}
		r.rep.add(row{"7", "peak RSS of " + x.name, settings, mib(x.rss), "—", "—", "≤ 60 MB", result})
	}
	d := describe(fmt.Sprintf("7 create_ticket @%d with the dispatcher running", n), o, "mcp-front", "dispatcher")
	if fm, err := scrape(front.Addr("metrics")); err == nil {
		d += fmt.Sprintf("; mean SQLite transaction mcp-front %s", meanOf(fm, commitSeconds))
	}
	if dm, err := scrape(disp.Addr("metrics")); err == nil {
		d += fmt.Sprintf(", dispatcher %s", meanOf(dm, commitSeconds))
	}
	if s1 := r.s1[n]; s1 != nil && s1.create.calls > 0 {
		d += fmt.Sprintf("; %.2f× scenario 1's mcp-front-only throughput", ratio(o.throughput(), s1.create.throughput()))
	}
	r.rep.detail("%s", d)
	fs.close()
	return stopAll(front, disp)
}

// scenario5 measures commit → delivered lag through the local target while
// n sessions call at half of what the whole pipeline sustains (scenario 7's
// closed-loop throughput with the dispatcher running): half load, the
// target. For information, it then measures the lag at the scenario's
// earlier pace, half of scenario 1's throughput (mcp-front alone), which on
// two shared cores is at or near the pipeline's saturation (decision 0097),
// and at ModerateLagRate.
func (r *runner) scenario5(ctx context.Context, n int) error {
	rate, pace := r.cfg.LagRate, "-lag-rate"
	if rate == 0 {
		if r.s7 == 0 {
			return errors.New("bench: scenario 5 needs scenario 7's throughput")
		}
		rate, pace = r.s7/2, "½ of scenario 7's "+perSec(r.s7)+", the whole pipeline's closed-loop throughput"
	}
	if err := r.lagRun(ctx, n, rate, pace, true); err != nil {
		return err
	}
	if s1 := r.s1[n]; s1 != nil && s1.create.throughput() > 0 && r.s7 > 0 {
		s1Rate := s1.create.throughput() / 2
		r.rep.add(row{"5", "half of scenario 1's rate against the whole pipeline's throughput",
			"½ of scenario 1's " + perSec(s1.create.throughput()) + " (mcp-front alone) ÷ scenario 7's closed-loop create_ticket throughput with the dispatcher running (" + perSec(r.s7) + ")",
			fmt.Sprintf("%.2f×", s1Rate/r.s7), "—", "—", "—", "info"})
		if err := r.lagRun(ctx, n, s1Rate, "½ of scenario 1's "+perSec(s1.create.throughput())+", mcp-front alone", false); err != nil {
			return err
		}
	}
	return r.lagRun(ctx, n, ModerateLagRate, "a fixed moderate pace", false)
}

// ModerateLagRate is scenario 5's second pace, in tickets per second: a
// busy agent fleet, far below what saturates the machine.
const ModerateLagRate = 100

// lagRun is one paced run of scenario 5. Its rows carry the scenario's
// targets when target is set, and are information otherwise.
func (r *runner) lagRun(ctx context.Context, n int, rate float64, pace string, target bool) error {
	dir, err := r.mkdir(fmt.Sprintf("s5-%.0f", rate))
	if err != nil {
		return err
	}
	disp, front, fs, stop, err := r.startPipeline(ctx, dir, n)
	if err != nil {
		return err
	}
	defer stop()
	l := r.single(createTool, &freshSource{}, front, disp)
	l.rate = rate
	o, err := fs.run(ctx, l)
	if err != nil {
		return err
	}
	db, err := openReadOnly(filepath.Join(dir, "tickets.db"))
	if err != nil {
		return err
	}
	defer db.Close()
	total := int64(len(o.done))
	drainStart := time.Now()
	err = waitFor(ctx, 2*time.Minute, "delivering every ticket", func() (bool, error) {
		n, err := count(ctx, db, `SELECT count(*) FROM deliveries WHERE state = 'delivered'`)
		return n >= total, err
	})
	if err != nil {
		return err
	}
	drained := time.Since(drainStart)
	lags, err := deliveryLags(filepath.Join(dir, "tickets.jsonl"), o.inWindow)
	if err != nil {
		return err
	}
	// Where the lag goes: commit → JetStream ack (the relay), and what the
	// two processes' SQLite commits cost (they share the file's write lock).
	relayLags, err := relayLags(ctx, db)
	if err != nil {
		return err
	}
	fm, err := scrape(front.Addr("metrics"))
	if err != nil {
		return err
	}
	dm, err := scrape(disp.Addr("metrics"))
	if err != nil {
		return err
	}
	settings := fmt.Sprintf("%d sessions paced at %s (%s), %s; dispatcher defaults, local target (fsync per ticket); "+
		"lag = local target's delivered_at − ticket created_at, %d tickets",
		n, perSec(rate), pace, r.once(), len(lags))
	p50, p99 := percentile(lags, 50), percentile(lags, 99)
	name, t50, t99 := "commit → delivered lag", "≤ 10 ms", "≤ 100 ms"
	res50, res99 := verdict(p50 <= 10*time.Millisecond), verdict(p99 <= 100*time.Millisecond)
	if !target {
		name = fmt.Sprintf("commit → delivered lag at %s", perSec(rate))
		t50, t99, res50, res99 = "—", "—", "info", "info"
	}
	if o.errors > 0 {
		res50, res99 = "ERR", "ERR"
	}
	r.rep.add(row{"5", name + " p50", settings, ms(p50), "—", "—", t50, res50})
	r.rep.add(row{"5", name + " p99", "same run", ms(p99), "—", "—", t99, res99})
	tag := "5"
	if !target {
		tag = "5 @" + perSec(rate)
	}
	r.rep.detail("%s", describe(fmt.Sprintf("%s paced create_ticket @%d", tag, n), o, "mcp-front", "dispatcher"))
	r.rep.detail("%s lag over %d tickets: p50 %s, p90 %s, p99 %s, max %s; the last ticket was delivered %s after the load stopped",
		tag, len(lags), ms(p50), ms(percentile(lags, 90)), ms(p99), ms(percentile(lags, 100)), drained.Round(time.Millisecond))
	r.rep.detail("%s where it goes: commit → JetStream ack (outbox.published_at, all %d rows) p50 %s, p99 %s; "+
		"mean SQLite transaction (BEGIN IMMEDIATE to durable COMMIT, write-lock waits included) mcp-front %s at %.1f ops/commit, dispatcher %s at %.1f ops/commit; "+
		"mean downstream call %s",
		tag, len(relayLags), ms(percentile(relayLags, 50)), ms(percentile(relayLags, 99)),
		meanOf(fm, commitSeconds), opsPerCommit(fm), meanOf(dm, commitSeconds), opsPerCommit(dm), meanOf(dm, deliverSeconds))
	fs.close()
	return stopAll(front, disp)
}

// relayLags are the times from commit to JetStream acknowledgement of every
// outbox row, sorted.
func relayLags(ctx context.Context, db *sql.DB) ([]time.Duration, error) {
	rows, err := db.QueryContext(ctx, `SELECT published_at - created_at FROM outbox WHERE published_at IS NOT NULL`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var lags []time.Duration
	for rows.Next() {
		var ns int64
		if err := rows.Scan(&ns); err != nil {
			return nil, err
		}
		lags = append(lags, time.Duration(ns))
	}
	return sortDurations(lags), rows.Err()
}

// deliveryLags reads the local target's file and returns, sorted, the lag of
// the tickets whose request ids are in ids.
func deliveryLags(path string, ids []string) ([]time.Duration, error) {
	want := make(map[string]bool, len(ids))
	for _, id := range ids {
		want[id] = true
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var lags []time.Duration
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 1<<20), 1<<20)
	for sc.Scan() {
		var l local.Line
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			return nil, fmt.Errorf("bench: %s: %w", path, err)
		}
		if want[l.Ticket.RequestID] {
			lags = append(lags, l.DeliveredAt.Sub(l.Ticket.CreatedAt))
			delete(want, l.Ticket.RequestID)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(want) > 0 {
		return nil, fmt.Errorf("bench: %d tickets of the window are missing from %s", len(want), path)
	}
	return sortDurations(lags), nil
}

// startPipeline starts the dispatcher and mcp-front on dir's database and
// connects n client sessions; stop closes the sessions and stops both
// processes (it is safe after an explicit stop of either).
func (r *runner) startPipeline(ctx context.Context, dir string, n int) (disp, front *proc, fs *sessions, stop func(), err error) {
	disp, err = r.startDispatcher(ctx, dir)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	front, err = r.startFront(ctx, "mcp-front", dir, false)
	if err != nil {
		disp.stop()
		return nil, nil, nil, nil, err
	}
	fs, err = connect(ctx, front.mcpURL(), r.cfg.Protocol, n)
	if err != nil {
		front.stop()
		disp.stop()
		return nil, nil, nil, nil, err
	}
	return disp, front, fs, func() { fs.close(); front.stop(); disp.stop() }, nil
}
