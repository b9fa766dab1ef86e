package bench

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"time"
)

// fingerprintScenario is issue 35's "a fingerprinted repeat against a
// plain replay" (decision 0195).
const fingerprintScenario = 13

// benchFingerprints is how many problems the fingerprinted repeats
// report, as a monitoring agent reports a few failing checks over and
// over.
const benchFingerprints = 8

// repeatSource hands out reports of benchFingerprints problems, each under
// a fresh request id: after the first of each, every call is an
// occurrence of an open ticket.
type repeatSource struct{ n atomic.Int64 }

func (s *repeatSource) next(int) (Args, bool) {
	i := s.n.Add(1)
	return Args{RequestID: newUUID(), Title: "Checkout returns 500", Body: sampleBody, Priority: "high", Labels: []string{"checkout"},
		Fingerprint: fmt.Sprintf("bench-checkout-%d", i%benchFingerprints)}, true
}

// cycleSource hands out a fixed list round and round: every call a
// replay, for as long as the window lasts.
type cycleSource struct {
	list []Args
	n    atomic.Int64
}

func (s *cycleSource) next(int) (Args, bool) {
	return s.list[(s.n.Add(1)-1)%int64(len(s.list))], true
}

// scenario13 compares, on one mcp-front and n sessions, create_ticket
// calls that are fingerprinted repeats (each a new request id whose
// fingerprint names an open ticket: an occurrence comment written with
// its outbox row) with plain replays of earlier creates, alternately.
func (r *runner) scenario13(ctx context.Context, n int) error {
	dir, front, s, err := r.frontSessions(ctx, "mcp-front-fingerprint", "s13", n)
	if err != nil {
		return err
	}
	defer front.stop()
	defer s.close()
	if err := r.warm(ctx, s, createTool); err != nil {
		return err
	}
	filed, err := s.run(ctx, r.single(createTool, &freshSource{}, front))
	if err != nil {
		return err
	}
	if len(filed.done) == 0 {
		return fmt.Errorf("bench: scenario 13: no ticket filed to replay (%v)", filed.firstErr)
	}
	// The first report of each fingerprint opens its ticket, unmeasured.
	if _, err := s.run(ctx, load{tool: createTool, src: &repeatSource{}, measure: r.cfg.Warmup}); err != nil {
		return err
	}
	repeats, replays := &outcome{}, &outcome{}
	var tally commitTally
	for round := range r.cfg.Rounds {
		l := r.profileRound(r.timed(createTool, &cycleSource{list: filed.done}, front), front, round, "mcp-front-replay")
		l.replayed = true
		o, err := s.run(ctx, l)
		if err != nil {
			return err
		}
		replays.merge(o)
		before, err := scrape(front.Addr("metrics"))
		if err != nil {
			return err
		}
		if o, err = s.run(ctx, r.profileRound(r.timed(createTool, &repeatSource{}, front), front, round, "mcp-front-repeat")); err != nil {
			return err
		}
		repeats.merge(o)
		after, err := scrape(front.Addr("metrics"))
		if err != nil {
			return err
		}
		tally.add(before, after)
	}
	s.close()
	if err := stopAll(front); err != nil {
		return err
	}
	tickets, err := fingerprintedTickets(ctx, filepath.Join(dir, "tickets.db"))
	if err != nil {
		return err
	}
	rt := ratio(repeats.throughput(), replays.throughput())
	result := verdict(rt >= 0.8)
	if repeats.errors+replays.errors > 0 || tickets != benchFingerprints {
		result = "ERR"
	}
	r.rep.add(row{"13", fmt.Sprintf("fingerprinted repeat against a plain replay, %d sessions", n),
		fmt.Sprintf("create_ticket under a new request_id naming one of %d open tickets' fingerprints (an occurrence comment each), "+
			"against replays of %d earlier creates, alternately; %d fingerprinted ticket(s) filed in all; %s",
			benchFingerprints, len(filed.done), tickets, r.rounds()),
		perSec(repeats.throughput()), perSec(replays.throughput()) + " replays", times(rt), "≥ 0.8×", result})
	r.rep.detail("%s; %.1f ops/commit, %s a commit", describe(fmt.Sprintf("13 fingerprinted repeat @%d", n), repeats, "mcp-front"),
		tally.opsPerCommit(), tally.meanCommit().Round(time.Microsecond))
	r.rep.detail("%s", describe(fmt.Sprintf("13 plain replay @%d", n), replays, "mcp-front"))
	return nil
}

// fingerprintedTickets counts the tickets filed with a fingerprint in the
// ledger at path: one per fingerprint if every repeat was grouped.
func fingerprintedTickets(ctx context.Context, path string) (int, error) {
	db, err := sql.Open("sqlite", "file:"+filepath.ToSlash(path)+"?mode=ro")
	if err != nil {
		return 0, err
	}
	defer db.Close()
	var n int
	err = db.QueryRowContext(ctx, `SELECT count(*) FROM requests WHERE kind = '' AND fingerprint <> ''`).Scan(&n)
	return n, err
}
