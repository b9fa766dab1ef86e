package bench

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
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
