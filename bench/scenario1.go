package bench

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"ticketrelay/front/mcptools"
)

const (
	createTool = "create_ticket"
	noopTool   = mcptools.NoopToolPrefix + createTool
	// sinkTarget has no consumer: scenario 4's rows stay in the stream, as
	// the raw baseline's messages do.
	sinkTarget = "bench-sink"
)

// s1Result is scenario 1 at one session count.
type s1Result struct {
	noop, create, sdk *outcome
	opsPerCommit      float64
	commitTime        time.Duration // mean SQLite transaction of the creates
	frontRSS          int64         // mcp-front's peak RSS over the whole block
}

// timed is one round: a short settling start, then the measured window.
func (r *runner) timed(tool string, src source, cpuOf ...*proc) load {
	return load{tool: tool, src: src, warmup: r.cfg.Settle, measure: r.cfg.Measure, cpuOf: cpuOf}
}

// single is a measurement made once: a warm-up, then twice a round's window.
func (r *runner) single(tool string, src source, cpuOf ...*proc) load {
	return load{tool: tool, src: src, warmup: r.cfg.Warmup, measure: 2 * r.cfg.Measure, cpuOf: cpuOf}
}

// warm runs new sessions for a while, unmeasured: connections, buffers,
// the servers' heaps and the page cache settle.
func (r *runner) warm(ctx context.Context, s *sessions, tool string) error {
	_, err := s.run(ctx, load{tool: tool, src: &freshSource{}, measure: r.cfg.Warmup})
	return err
}

// scenario1 measures create_ticket against its no-op twin on one mcp-front
// at n sessions; with top set also against go-sdk's default no-op server
// (scenario 2) and the replay of the same calls (scenario 3).
func (r *runner) scenario1(ctx context.Context, n int, top bool) error {
	dir, err := r.mkdir(fmt.Sprintf("s1-%d", n))
	if err != nil {
		return err
	}
	pprof := top && r.cfg.PprofDir != ""
	start := r.startFront
	if pprof {
		start = r.startProfiledFront
	}
	front, err := start(ctx, "mcp-front", dir, true)
	if err != nil {
		return err
	}
	defer front.stop()
	fs, err := connect(ctx, front.mcpURL(), r.cfg.Protocol, n)
	if err != nil {
		return err
	}
	defer fs.close()
	var sdk *proc
	var ss *sessions
	if top && r.cfg.wants(2) {
		args := []string{"-listen", "127.0.0.1:0"}
		if pprof {
			args = append(args, "-pprof", "127.0.0.1:0")
		}
		if sdk, err = startProc(ctx, "noopserver", r.bin("noopserver"), dir, args, nil, "mcp"); err != nil {
			return err
		}
		defer sdk.stop()
		if ss, err = connect(ctx, sdk.mcpURL(), r.cfg.Protocol, n); err != nil {
			return err
		}
		defer ss.close()
	}

	for _, w := range []struct {
		s    *sessions
		tool string
	}{{fs, noopTool}, {fs, createTool}, {ss, createTool}} {
		if w.s != nil {
			if err := r.warm(ctx, w.s, w.tool); err != nil {
				return err
			}
		}
	}
	res := &s1Result{noop: &outcome{}, create: &outcome{}, sdk: &outcome{}}
	var tally commitTally
	for round := range r.cfg.Rounds {
		l := r.timed(noopTool, &freshSource{}, front)
		if pprof && round == 0 {
			l.during = r.profile(front.pprofAddr(), fmt.Sprintf("mcp-front-noop-%d", n))
		}
		o, err := fs.run(ctx, l)
		if err != nil {
			return err
		}
		res.noop.merge(o)

		before, err := scrape(front.Addr("metrics"))
		if err != nil {
			return err
		}
		l = r.timed(createTool, &freshSource{}, front)
		if pprof && round == 0 {
			l.during = r.profile(front.pprofAddr(), fmt.Sprintf("mcp-front-create-%d", n))
		}
		if o, err = fs.run(ctx, l); err != nil {
			return err
		}
		res.create.merge(o)
		after, err := scrape(front.Addr("metrics"))
		if err != nil {
			return err
		}
		tally.add(before, after)

		if ss != nil {
			l = r.timed(createTool, &freshSource{}, sdk)
			if pprof && round == 0 {
				l.during = r.profile(sdk.pprofAddr(), fmt.Sprintf("noopserver-%d", n))
			}
			if o, err = ss.run(ctx, l); err != nil {
				return err
			}
			res.sdk.merge(o)
		}
	}
	res.opsPerCommit, res.commitTime = tally.opsPerCommit(), tally.meanCommit()
	r.s1[n] = res
	if r.cfg.wants(1) {
		r.report1(n, top, res)
	}
	if ss != nil {
		r.report2(n, res)
	}
	if top && r.cfg.wants(3) {
		l := r.single(createTool, &listSource{list: res.create.done}, front)
		l.warmup = r.cfg.Settle // the sessions are warm
		l.replayed = true
		if pprof {
			l.during = r.profile(front.pprofAddr(), fmt.Sprintf("mcp-front-replay-%d", n))
		}
		o, err := fs.run(ctx, l)
		if err != nil {
			return err
		}
		r.report3(n, res, o)
	}
	if rss, err := front.peakRSS(); err == nil {
		res.frontRSS = rss
	}
	if pprof {
		r.saveProfile(ctx, front.pprofAddr(), "/debug/pprof/heap", fmt.Sprintf("mcp-front-heap-%d", n))
	}
	fs.close()
	if ss != nil {
		ss.close()
	}
	return stopAll(front, sdk)
}

// profile returns a hook that saves a CPU profile of the measured window.
func (r *runner) profile(addr, name string) func(ctx context.Context, window time.Duration) {
	return func(ctx context.Context, window time.Duration) {
		secs := max(1, int(window/time.Second))
		ctx, cancel := context.WithTimeout(ctx, window+30*time.Second)
		defer cancel()
		r.saveProfile(ctx, addr, fmt.Sprintf("/debug/pprof/profile?seconds=%d", secs), name)
	}
}

// saveProfile downloads a pprof profile to PprofDir/name.pprof.
func (r *runner) saveProfile(ctx context.Context, addr, path, name string) {
	url := "http://" + addr + path
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		r.log.Warn("pprof", "url", url, "err", err)
		return
	}
	defer resp.Body.Close()
	if err := os.MkdirAll(r.cfg.PprofDir, 0o755); err != nil {
		return
	}
	file := filepath.Join(r.cfg.PprofDir, name+".pprof")
	f, err := os.Create(file)
	if err != nil {
		return
	}
	defer f.Close()
	if _, err := bufio.NewReader(resp.Body).WriteTo(f); err != nil {
		r.log.Warn("pprof", "url", url, "err", err)
		return
	}
	r.log.Info("profile saved", "path", file)
}

func (r *runner) report1(n int, top bool, res *s1Result) {
	c, b := res.create, res.noop
	settings := fmt.Sprintf("%d sessions, streamable HTTP %s, synchronous=FULL, mcp-front only, %s; %.1f ops/commit",
		n, r.cfg.Protocol, r.rounds(), res.opsPerCommit)
	thr := ratio(c.throughput(), b.throughput())
	p99c, p99b := percentile(c.lat, 99), percentile(b.lat, 99)
	lat := ratio(float64(p99c), float64(p99b))
	thrTarget, latTarget, thrResult, latResult := "—", "—", "info", "info"
	if top {
		thrTarget, latTarget = "≥ 0.9×", "≤ 1.5×"
		thrResult, latResult = verdict(thr >= 0.9), verdict(lat <= 1.5)
	}
	if c.errors+b.errors > 0 {
		thrResult, latResult = "ERR", "ERR"
	}
	r.rep.add(row{"1", fmt.Sprintf("create_ticket throughput, %d sessions", n), settings,
		perSec(c.throughput()), perSec(b.throughput()) + " no-op tool", times(thr), thrTarget, thrResult})
	r.rep.add(row{"1", fmt.Sprintf("create_ticket p99 latency, %d sessions", n), "same runs",
		ms(p99c), ms(p99b) + " no-op tool", times(lat), latTarget, latResult})
	r.rep.detail("%s; mean SQLite transaction %s at %.1f ops/commit", describe(fmt.Sprintf("1 create_ticket @%d", n), c, "mcp-front"),
		ms(res.commitTime), res.opsPerCommit)
	r.rep.detail("%s", describe(fmt.Sprintf("1 %s @%d", noopTool, n), b, "mcp-front"))
}

func (r *runner) report2(n int, res *s1Result) {
	c, s := res.create, res.sdk
	thr := ratio(c.throughput(), s.throughput())
	result := verdict(thr >= 1.3)
	if c.errors+s.errors > 0 {
		result = "ERR"
	}
	r.rep.add(row{"2", fmt.Sprintf("create_ticket vs go-sdk default no-op server, %d sessions", n),
		"the scenario 1 runs; bench/noopserver: mcp.AddTool typed no-op, default options, alternated",
		perSec(c.throughput()), perSec(s.throughput()) + " go-sdk no-op", times(thr), "≥ 1.3×", result})
	cc, sc := c.cpuPerCall(0), s.cpuPerCall(0)
	r.rep.add(row{"2", "server CPU per call (lower is better)", fmt.Sprintf("%d sessions; /proc utime+stime over the window", n),
		fmt.Sprintf("%d µs create_ticket", cc.Microseconds()),
		fmt.Sprintf("%d µs go-sdk no-op", sc.Microseconds()),
		times(ratio(float64(cc), float64(sc))), "report", "info"})
	r.rep.detail("%s", describe(fmt.Sprintf("2 go-sdk default no-op server @%d", n), s, "noopserver"))
	r.rep.detail("2 CPU per call @%d: create_ticket %d µs, bench_noop twin %d µs, go-sdk default no-op %d µs",
		n, cc.Microseconds(), res.noop.cpuPerCall(0).Microseconds(), sc.Microseconds())
}

func (r *runner) report3(n int, res *s1Result, o *outcome) {
	c := res.create
	rt := ratio(o.throughput(), c.throughput())
	result := verdict(rt >= 1.0)
	if o.errors > 0 {
		result = "ERR"
	}
	r.rep.add(row{"3", fmt.Sprintf("replay (same request_ids), %d sessions", n),
		fmt.Sprintf("the %d calls of scenario 1 at %d sessions again, in order, on the same sessions; %s window", len(c.done), n, 2*r.cfg.Measure),
		perSec(o.throughput()), perSec(c.throughput()) + " first calls", times(rt), "≥ 1.0×", result})
	r.rep.detail("%s", describe(fmt.Sprintf("3 replay @%d", n), o, "mcp-front"))
}
