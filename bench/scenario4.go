package bench

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"time"
)

// scenario4 times the relay draining a backlog against a raw async publish
// loop to an embedded server with the same settings. Both run in rounds,
// alternately (the dispatcher is stopped between its rounds), so that both
// see the same disk: on a shared machine its fsync latency swings widely.
func (r *runner) scenario4(ctx context.Context) error {
	rows, rounds := r.cfg.RelayRows, r.cfg.Rounds
	dir, err := r.mkdir("s4")
	if err != nil {
		return err
	}
	rawDir, err := r.mkdir("s4-raw")
	if err != nil {
		return err
	}
	dbPath := filepath.Join(dir, "tickets.db")
	took, err := prefill{path: dbPath, rows: rows, target: sinkTarget}.run(ctx)
	if err != nil {
		return err
	}
	r.log.Info("outbox backlog written", "rows", rows, "took", took.Round(time.Millisecond))
	raw, err := startRawPublisher(ctx, rawDir, sinkTarget)
	if err != nil {
		return err
	}
	defer raw.close()
	db, err := openReadOnly(dbPath)
	if err != nil {
		return err
	}
	defer db.Close()

	var rawSent int
	var rawTime, rawCPU, relaySpan, relayCPU time.Duration
	var relayRows, firsts int64
	for k := 1; k <= rounds; k++ {
		// Raw: this round's share of the baseline's messages.
		n := r.cfg.RawRows*k/rounds - rawSent
		c0, _ := cpuTime(selfPID)
		d, err := raw.publish(ctx, n)
		if err != nil {
			return err
		}
		c1, _ := cpuTime(selfPID)
		rawSent += n
		rawTime += d
		rawCPU += c1 - c0

		// Relay: run the dispatcher until this round's share is published.
		target := int64(rows * k / rounds)
		roundStart := time.Now().UnixNano()
		disp, err := r.startDispatcher(ctx, dir)
		if err != nil {
			return err
		}
		err = waitFor(ctx, 5*time.Minute, "relaying the backlog", func() (bool, error) {
			n, err := count(ctx, db, `SELECT count(*) FROM outbox WHERE published_at IS NOT NULL`)
			return n >= target, err
		})
		cpu, cerr := cpuTime(disp.Pid())
		if serr := disp.stop(); err == nil {
			err = serr
		}
		if err != nil {
			return err
		}
		if cerr != nil {
			return cerr
		}
		relayCPU += cpu
		// The round's rate runs from its first mark (a batch of up to 512)
		// to its last: startup is not counted.
		var n2, first int64
		var lo, hi sql.NullInt64
		if err := db.QueryRowContext(ctx, `SELECT count(*), min(published_at), max(published_at) FROM outbox WHERE published_at >= ?`,
			roundStart).Scan(&n2, &lo, &hi); err != nil {
			return err
		}
		if first, err = count(ctx, db, `SELECT count(*) FROM outbox WHERE published_at = ?`, lo.Int64); err != nil {
			return err
		}
		if n2 == 0 || hi.Int64 <= lo.Int64 {
			return fmt.Errorf("bench: relay round %d marked %d rows", k, n2)
		}
		relayRows += n2 - first
		firsts += first
		relaySpan += time.Duration(hi.Int64 - lo.Int64)
	}
	left, err := count(ctx, db, `SELECT count(*) FROM outbox WHERE published_at IS NULL`)
	if err != nil {
		return err
	}
	if left != 0 {
		return fmt.Errorf("bench: %d of %d rows still unpublished after the last round", left, rows)
	}
	relay := float64(relayRows) / relaySpan.Seconds()
	rawRate := float64(rawSent) / rawTime.Seconds()
	rt := ratio(relay, rawRate)
	r.rep.add(row{"4", fmt.Sprintf("relay a %s-row outbox backlog to JetStream", count3(rows)),
		fmt.Sprintf("dispatcher defaults (batches of 512 as JetStream atomic batches, up to 8 in flight), embedded nats-server SyncAlways; rows addressed to a target without a consumer, "+
			"so the forwarder is idle, as for raw; %d rounds alternating relay (%s rows each) and raw (%s messages each)",
			rounds, count3(rows/rounds), count3(r.cfg.RawRows/rounds)),
		perSec(relay), perSec(rawRate) + " raw async publish", times(rt), "≥ 0.8×", verdict(rt >= 0.8)})
	r.rep.detail("4 relay: %d rows marked published in %s, not counting each round's first batch (%d rows, dispatcher start-up); backlog written in-process in %s; dispatcher CPU %d µs/row (start-ups included)",
		relayRows, relaySpan.Round(time.Millisecond), firsts, took.Round(time.Millisecond), (relayCPU / time.Duration(rows)).Microseconds())
	r.rep.detail("4 raw: %d × js.PublishMsgAsync with Nats-Msg-Id (4096 in flight) in %s, same stream (natsjs.EnsureStream) and payload size; publisher+server CPU %d µs/message",
		rawSent, rawTime.Round(time.Millisecond), (rawCPU / time.Duration(rawSent)).Microseconds())
	return nil
}
