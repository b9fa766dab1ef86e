package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"ticketrelay/testkit/e2eproc"
)

// Run runs the scenarios of cfg, prints the table to cfg.Stdout and writes
// it as Markdown under cfg.OutDir. A scenario that fails is reported as ERR
// in the table; Run's error is for a run that could not happen at all.
func Run(ctx context.Context, cfg Config) error {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return err
	}
	// The servers run in their data directories: name them by absolute path.
	bin, err := filepath.Abs(cfg.BinDir)
	if err != nil {
		return err
	}
	cfg.BinDir = bin
	need := []string{"mcp-front", "dispatcher", "noopserver"}
	if cfg.wants(8) {
		need = append(need, "receiver", "riverbaseline")
	}
	for _, b := range need {
		if _, err := os.Stat(filepath.Join(cfg.BinDir, b)); err != nil {
			return fmt.Errorf("bench: %s not built (make bench builds it): %w", b, err)
		}
	}
	work := cfg.WorkDir
	if work == "" {
		if work, err = os.MkdirTemp("", "ticketrelay-bench-"); err != nil {
			return err
		}
		if !cfg.Keep {
			defer os.RemoveAll(work)
		}
	} else if err := os.MkdirAll(work, 0o755); err != nil {
		return err
	}
	r := &runner{cfg: cfg, log: cfg.Log, work: work, s1: map[int]*s1Result{}}
	r.rep = &report{started: time.Now(), quick: cfg.Quick, version: cfg.Version, machine: describeMachine(work)}
	r.log.Info("benchmark starting", "mode", r.rep.mode(), "work", work, "machine", r.rep.machine.String())

	r.runAll(ctx)
	if err := ctx.Err(); err != nil {
		return err
	}
	r.rep.elapsed = time.Since(r.rep.started)
	r.rep.notes = r.notes()
	r.rep.text(cfg.Stdout)
	if cfg.OutDir != "" {
		name := resultName(cfg)
		path := filepath.Join(cfg.OutDir, name)
		if err := writeFileAtomic(path, r.rep.markdown); err != nil {
			return err
		}
		fmt.Fprintf(cfg.Stdout, "written to %s\n", path)
	}
	return nil
}

// resultName is the file a run's table is written to: a run of some of the
// scenarios (-only) never replaces the table of a whole run.
func resultName(cfg Config) string {
	if cfg.AB != nil {
		return "ab.md"
	}
	name := "latest"
	if cfg.Quick {
		name += "-quick"
	}
	if len(cfg.Only) < len(allScenarios) {
		var only []string
		for _, s := range cfg.Only {
			only = append(only, strconv.Itoa(s))
		}
		name += "-only-" + strings.Join(only, "-")
	}
	return name + ".md"
}

type runner struct {
	cfg  Config
	log  *slog.Logger
	rep  *report
	work string
	s1   map[int]*s1Result
	// dispatcherBin, if set, is the dispatcher binary scenario 8's relay
	// sender runs (an A/B of deliveries); "": BinDir's.
	dispatcherBin string
	// s7 is scenario 7's throughput: create_ticket with the dispatcher
	// beside mcp-front, closed loop, what the whole pipeline sustains on
	// this machine. 0 until scenario 7 has run.
	s7 float64
}

func (r *runner) runAll(ctx context.Context) {
	cfg := r.cfg
	top := cfg.maxSessions()
	if cfg.AB != nil {
		if cfg.AB.Delivery {
			r.step(ctx, "A/B comparison of deliveries", func() error { return r.compareABDelivery(ctx, *cfg.AB) })
			return
		}
		r.step(ctx, "A/B comparison", func() error { return r.compareAB(ctx, top, *cfg.AB) })
		return
	}
	if cfg.wants(1) {
		for _, n := range cfg.Sessions {
			if n != top {
				r.step(ctx, fmt.Sprintf("scenario 1 at %d sessions", n), func() error { return r.scenario1(ctx, n, false) })
			}
		}
	}
	if cfg.wants(1, 2, 3) {
		r.step(ctx, fmt.Sprintf("scenarios 1-3 at %d sessions", top), func() error { return r.scenario1(ctx, top, true) })
	}
	if cfg.wants(7) || (cfg.wants(5) && cfg.LagRate == 0) { // scenario 5 paces at half of 7's rate
		r.step(ctx, "scenario 7", func() error { return r.scenario7(ctx, top) })
	}
	if cfg.wants(5) {
		r.step(ctx, "scenario 5", func() error { return r.scenario5(ctx, top) })
	}
	if cfg.wants(4) {
		r.step(ctx, "scenario 4", func() error { return r.scenario4(ctx) })
	}
	if cfg.wants(6) {
		r.step(ctx, "scenario 6", func() error { return r.scenario6(ctx, top) })
	}
	if cfg.wants(8) {
		r.step(ctx, "scenario 8", func() error { return r.scenario8(ctx) })
	}
	if cfg.wants(clusterScenario) {
		r.step(ctx, "scenario 9 (multi-host)", func() error { return r.scenario9(ctx, top) })
	}
	if cfg.wants(signInScenario) {
		r.step(ctx, "scenario 10 (sign-in and audit trail)", func() error { return r.scenario10(ctx, top) })
	}
	if cfg.wants(consoleScenario) {
		r.step(ctx, "scenario 11 (console)", func() error { return r.scenario11(ctx) })
	}
	if cfg.wants(searchScenario) {
		r.step(ctx, "scenario 12 (search)", func() error { return r.scenario12(ctx, top) })
	}
	if cfg.wants(fingerprintScenario) {
		r.step(ctx, "scenario 13 (fingerprinted repeats)", func() error { return r.scenario13(ctx, top) })
	}
	if cfg.wants(commentScenario) {
		r.step(ctx, fmt.Sprintf("scenario %d (add_comment)", commentScenario), func() error { return r.scenario14(ctx, top) })
	}
}

// step runs one scenario and turns its failure into an ERR row.
func (r *runner) step(ctx context.Context, name string, f func() error) {
	if ctx.Err() != nil {
		return
	}
	start := time.Now()
	r.log.Info("running " + name)
	if err := f(); err != nil {
		if ctx.Err() != nil {
			return
		}
		r.log.Error(name+" failed", "err", err)
		r.rep.add(row{id: "!", scenario: name, result: "ERR", settings: "see the measurements below"})
		r.rep.detail("ERR %s: %v", name, oneLine(err))
		return
	}
	r.log.Info(name+" done", "took", time.Since(start).Round(100*time.Millisecond))
}

// rounds describes the timing of an alternated measurement.
func (r *runner) rounds() string {
	return fmt.Sprintf("%d×%s windows alternated with the baseline", r.cfg.Rounds, r.cfg.Measure)
}

// once describes the timing of a single measurement.
func (r *runner) once() string {
	return fmt.Sprintf("%s window after %s warm-up", 2*r.cfg.Measure, r.cfg.Warmup)
}

func (r *runner) mkdir(name string) (string, error) {
	dir := filepath.Join(r.work, name)
	if err := os.RemoveAll(dir); err != nil {
		return "", err
	}
	return dir, os.MkdirAll(dir, 0o755)
}

func (r *runner) bin(name string) string { return filepath.Join(r.cfg.BinDir, name) }

// frontSessions starts mcp-front (name) on a new directory dirName of the
// run and opens n sessions to it.
func (r *runner) frontSessions(ctx context.Context, name, dirName string, n int) (dir string, front *proc, s *sessions, err error) {
	if dir, err = r.mkdir(dirName); err != nil {
		return "", nil, nil, err
	}
	start := r.startFront
	if r.cfg.PprofDir != "" {
		start = r.startProfiledFront
	}
	if front, err = start(ctx, name, dir, false); err != nil {
		return "", nil, nil, err
	}
	if s, err = connect(ctx, front.mcpURL(), r.cfg.Protocol, n); err != nil {
		front.stop()
		return "", nil, nil, err
	}
	return dir, front, s, nil
}

// profileRound has l save a CPU profile of its window as name when front
// runs under profwrap and this is the first round.
func (r *runner) profileRound(l load, front *proc, round int, name string) load {
	if front.pprof != "" && round == 0 {
		l.during = r.profile(front.pprof, name)
	}
	return l
}

// startFront starts mcp-front on dir/tickets.db with ports chosen by the
// system.
func (r *runner) startFront(ctx context.Context, name, dir string, noop bool, env ...string) (*proc, error) {
	return r.startFrontBinary(ctx, name, r.bin("mcp-front"), dir, noop, env...)
}

// startProfiledFront is startFront with bench/profwrap (mcp-front's own
// code with a pprof listener, at p.pprof) for -pprof.
func (r *runner) startProfiledFront(ctx context.Context, name, dir string, noop bool, env ...string) (*proc, error) {
	addr, err := e2eproc.FreeAddr()
	if err != nil {
		return nil, err
	}
	p, err := r.startFrontBinary(ctx, name, r.bin("profwrap"), dir, noop, append(slices.Clip(env), "BENCH_PPROF_ADDR="+addr)...)
	if err != nil {
		return nil, err
	}
	p.pprof = addr
	return p, nil
}

func (r *runner) startFrontBinary(ctx context.Context, name, bin, dir string, noop bool, env ...string) (*proc, error) {
	args := []string{"-create-db", "-db", filepath.Join(dir, "tickets.db"), "-listen", "127.0.0.1:0", "-metrics-listen", "127.0.0.1:0"}
	if noop {
		args = append(args, "-bench-noop-tool")
	}
	args = append(args, r.cfg.FrontArgs...)
	return startProc(ctx, name, bin, dir, args, append(append([]string(nil), r.cfg.FrontEnv...), env...), "mcp", "metrics")
}

// startDispatcher starts a dispatcher with its embedded nats-server on
// dir, sharing dir/tickets.db.
func (r *runner) startDispatcher(ctx context.Context, dir string) (*proc, error) {
	args := []string{"-data", dir, "-db", filepath.Join(dir, "tickets.db"),
		"-nats-listen", "127.0.0.1:0", "-metrics-listen", "127.0.0.1:0"}
	return startProc(ctx, "dispatcher", r.bin("dispatcher"), dir, append(args, r.cfg.DispatcherArgs...), r.cfg.DispatcherEnv, "metrics")
}

// waitFor polls cond every 50ms until it holds or timeout passes.
func waitFor(ctx context.Context, timeout time.Duration, what string, cond func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	for {
		ok, err := cond()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("bench: %s: not done after %s", what, timeout)
		}
		if !sleepUntil(ctx, time.Now().Add(50*time.Millisecond)) {
			return ctx.Err()
		}
	}
}

func stopAll(ps ...*proc) error {
	var first error
	for _, p := range ps {
		if p == nil {
			continue
		}
		if err := p.stop(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

func writeFileAtomic(path string, write func(io.Writer)) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	write(f)
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func oneLine(err error) string {
	s := strings.ReplaceAll(err.Error(), "\n", " ⏎ ")
	if len(s) > 1500 {
		s = s[:1500] + "…"
	}
	return s
}

// errNote describes the failed calls of a measurement, if any.
func errNote(o *outcome) string {
	if o.errors == 0 {
		return ""
	}
	return fmt.Sprintf("; %d FAILED CALLS, first: %v", o.errors, oneLine(o.firstErr))
}

// describe summarises one measurement for the details list.
func describe(name string, o *outcome, procs ...string) string {
	s := fmt.Sprintf("%s: %d calls in %s = %s; latency p50 %s, p90 %s, p99 %s, max %s",
		name, o.calls, o.window.Round(time.Millisecond), perSec(o.throughput()),
		ms(percentile(o.lat, 50)), ms(percentile(o.lat, 90)), ms(percentile(o.lat, 99)), ms(percentile(o.lat, 100)))
	for i, p := range procs {
		s += fmt.Sprintf("; %s CPU %d µs/call", p, o.cpuPerCall(i).Microseconds())
	}
	if o.calls > 0 {
		s += fmt.Sprintf("; load generator CPU %d µs/call", (o.selfCPU / time.Duration(o.calls)).Microseconds())
	}
	return s + errNote(o)
}

func (r *runner) notes() []string {
	n := []string{
		"Every figure is measured in the same run as its baseline, on the same machine, with the processes of the other scenarios stopped; " +
			"figures and baselines are alternated round by round where both are timed runs. The machine is shared: read the ratios, not the absolute numbers.",
		"Load: the go-sdk MCP client over streamable HTTP on loopback, protocol " + r.cfg.Protocol +
			", one session (own HTTP client and connections) per simulated agent, " +
			"each calling back to back (closed loop) with a fresh random UUID request_id per call; warm-up calls are not measured. " +
			"Throughput counts calls that ended in the window; latency is client-side, for calls that started in it.",
		"Server CPU per call: user+system time from /proc/<pid>/stat over the window divided by the calls in it (10 ms ticks). Peak RSS: VmHWM from /proc/<pid>/status; MB = 2^20 bytes.",
		"mcp-front and dispatcher run with their defaults (synchronous=FULL, WAL, info logging to a file); the no-op baseline of scenario 1 is " +
			"mcp-front -bench-noop-tool: create_ticket's schema, decoding, validation, metrics and result, no ledger write.",
	}
	if len(r.cfg.FrontEnv) > 0 || len(r.cfg.FrontArgs) > 0 || len(r.cfg.DispatcherEnv) > 0 || len(r.cfg.DispatcherArgs) > 0 || r.cfg.LagRate > 0 {
		n = append(n, fmt.Sprintf("NOT DEFAULTS: mcp-front environment %q, extra mcp-front flags %q, dispatcher environment %q, extra dispatcher flags %q, scenario 5 pace %v/s.",
			r.cfg.FrontEnv, r.cfg.FrontArgs, r.cfg.DispatcherEnv, r.cfg.DispatcherArgs, r.cfg.LagRate))
	}
	return n
}
