package bench

import (
	"cmp"
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"
)

// compareAB runs create_ticket at n sessions on two mcp-front variants side
// by side, alternating rounds, and reports B against A.
func (r *runner) compareAB(ctx context.Context, n int, ab ABConfig) error {
	type side struct {
		name string
		bin  string
		env  []string
		args []string
		dir  string
		p    *proc
		s    *sessions
		o    *outcome
	}
	sides := []*side{{name: "A", bin: ab.BinA, env: ab.EnvA, args: ab.ArgsA}, {name: "B", bin: ab.BinB, env: ab.EnvB, args: ab.ArgsB}}
	for _, sd := range sides {
		if sd.bin == "" {
			sd.bin = r.bin("mcp-front")
		}
		dir, err := r.mkdir("ab-" + sd.name)
		if err != nil {
			return err
		}
		sd.dir, sd.o = dir, &outcome{}
		if ab.Rows > 0 {
			if _, err := (prefill{path: filepath.Join(dir, "tickets.db"), rows: ab.Rows, target: "local", published: true}).run(ctx); err != nil {
				return err
			}
		}
	}
	for _, sd := range sides {
		args := append([]string{"-create-db", "-db", filepath.Join(sd.dir, "tickets.db"), "-listen", "127.0.0.1:0", "-metrics-listen", "127.0.0.1:0"}, sd.args...)
		p, err := startProc(ctx, "mcp-front-"+sd.name, sd.bin, sd.dir, args, sd.env, "mcp")
		if err != nil {
			return err
		}
		sd.p = p
		defer p.stop()
		if sd.s, err = connect(ctx, p.mcpURL(), r.cfg.Protocol, n); err != nil {
			return err
		}
		defer sd.s.close()
		if err := r.warm(ctx, sd.s, createTool); err != nil {
			return err
		}
	}
	for range r.cfg.Rounds {
		for _, sd := range sides {
			o, err := sd.s.run(ctx, r.timed(createTool, &freshSource{}, sd.p))
			if err != nil {
				return err
			}
			sd.o.merge(o)
		}
	}
	a, b := sides[0].o, sides[1].o
	desc := func(sd *side) string {
		return fmt.Sprintf("%s: %s env %q flags %q", sd.name, sd.bin, sd.env, sd.args)
	}
	settings := fmt.Sprintf("create_ticket, %d sessions, %s; %s; %s", n, r.rounds(), desc(sides[0]), desc(sides[1]))
	if ab.Rows > 0 {
		settings += fmt.Sprintf("; both ledgers prefilled with %s rows", count3(ab.Rows))
	}
	result := "info"
	if a.errors+b.errors > 0 {
		result = "ERR"
	}
	r.rep.add(row{"A/B", "throughput, B vs A", settings, perSec(b.throughput()), perSec(a.throughput()),
		times(ratio(b.throughput(), a.throughput())), "—", result})
	r.rep.add(row{"A/B", "server CPU per call, B vs A", "same runs", fmt.Sprintf("%d µs", b.cpuPerCall(0).Microseconds()),
		fmt.Sprintf("%d µs", a.cpuPerCall(0).Microseconds()), times(ratio(float64(b.cpuPerCall(0)), float64(a.cpuPerCall(0)))), "—", result})
	r.rep.add(row{"A/B", "p99 latency, B vs A", "same runs", ms(percentile(b.lat, 99)), ms(percentile(a.lat, 99)),
		times(ratio(float64(percentile(b.lat, 99)), float64(percentile(a.lat, 99)))), "—", result})
	for _, sd := range sides {
		d := describe("A/B "+sd.name, sd.o, "mcp-front")
		if m, err := scrape(sd.p.Addr("metrics")); err == nil {
			d += fmt.Sprintf("; mean SQLite transaction %s at %.1f ops/commit (whole run)", meanOf(m, commitSeconds), opsPerCommit(m))
		}
		if rss, err := sd.p.peakRSS(); err == nil {
			d += "; peak RSS " + mib(rss)
		}
		r.rep.detail("%s", strings.TrimSpace(d))
	}
	return nil
}

// compareABDelivery drains scenario 8's backlog with two dispatcher
// variants, alternately (A, B, A, B…), BacklogRounds times each, and
// reports B's median delivery rate against A's.
func (r *runner) compareABDelivery(ctx context.Context, ab ABConfig) error {
	n := r.cfg.BacklogRows
	saved := r.cfg.DispatcherEnv
	defer func() { r.dispatcherBin, r.cfg.DispatcherEnv = "", saved }()
	type side struct {
		name, bin string
		env       []string
		drains    []drain
	}
	sides := []*side{{name: "A", bin: ab.BinA, env: ab.EnvA}, {name: "B", bin: ab.BinB, env: ab.EnvB}}
	for k := range r.cfg.BacklogRounds {
		for _, sd := range sides {
			r.dispatcherBin = sd.bin
			r.cfg.DispatcherEnv = append(append([]string(nil), saved...), sd.env...)
			d, err := r.backlogRelay(ctx, fmt.Sprintf("ab-%s-%d", sd.name, k+1), n, 0, "", "")
			if err != nil {
				return err
			}
			sd.drains = append(sd.drains, d)
		}
	}
	rate := func(sd *side) float64 { return median(sd.drains, drain.rate) }
	cpu := func(sd *side) time.Duration {
		return time.Duration(median(sd.drains, func(d drain) float64 { return float64(d.cpuPer()) }))
	}
	a, b := sides[0], sides[1]
	desc := func(sd *side) string {
		return fmt.Sprintf("%s: %s env %q", sd.name, cmp.Or(sd.bin, r.bin("dispatcher")), sd.env)
	}
	settings := fmt.Sprintf("deliver a %s-ticket backlog to a webhook (scenario 8's ticketrelay sender), medians of %d runs each, alternated; %s; %s",
		count3(n), r.cfg.BacklogRounds, desc(a), desc(b))
	r.rep.add(row{"A/B", "delivery throughput, B vs A", settings, perSec(rate(b)), perSec(rate(a)), times(ratio(rate(b), rate(a))), "—", "info"})
	r.rep.add(row{"A/B", "dispatcher CPU per delivered ticket, B vs A", "same runs", fmt.Sprintf("%d µs", cpu(b).Microseconds()),
		fmt.Sprintf("%d µs", cpu(a).Microseconds()), times(ratio(float64(cpu(b)), float64(cpu(a)))), "—", "info"})
	for _, sd := range sides {
		for i, d := range sd.drains {
			r.rep.detail("A/B %s round %d: %s", sd.name, i+1, d)
		}
	}
	return nil
}
