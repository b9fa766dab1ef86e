package bench

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"time"
)

// Config is one benchmark run. Zero fields take the defaults of the full
// run, or of the quick one when Quick is set (see WithDefaults).
type Config struct {
	// BinDir holds mcp-front, dispatcher and noopserver (and profwrap when
	// PprofDir is set; receiver and riverbaseline for scenario 8). Required.
	BinDir string
	// OutDir receives latest.md (full run) or latest-quick.md, with
	// "-only-N-M" before ".md" when Only names some of the scenarios.
	// Empty: none.
	OutDir string
	// WorkDir holds every scenario's data directory. Default: a new
	// temporary directory, removed at the end unless Keep is set.
	WorkDir string
	Keep    bool
	// Quick is the ~1 minute smoke run (BENCH_QUICK=1).
	Quick bool
	// Warmup is an unmeasured run that precedes the first measurement on a
	// set of sessions, and the unmeasured start of the single-run scenarios
	// (3, 5, 7). Default 1.5s (quick: 0.5s).
	Warmup time.Duration
	// Settle is the unmeasured start of every later timed run. Default 0.5s
	// (quick: 0.25s).
	Settle time.Duration
	// Measure is the measured window of one round. Default 2.5s (quick:
	// 2s); the single-run scenarios measure twice as long.
	Measure time.Duration
	// Rounds is how many times each figure and its baseline are measured,
	// alternately, so that both see the same noise. Default 4 (quick: 1).
	Rounds int
	// Sessions are scenario 1's client session counts; the largest is the
	// one scenarios 2, 3, 5, 6 and 7 use. Default 1, 8, 32.
	Sessions []int
	// Protocol is the MCP protocol version the clients ask for. Default
	// 2025-11-25, what agents speak today: sessions with an SSE GET stream.
	// 2026-07-28 clients are served without sessions.
	Protocol string
	// RelayRows is scenario 4's backlog. Default 100,000 (quick: 10,000).
	RelayRows int
	// RawRows is how many messages the raw publish baseline of scenario 4
	// sends: its rate is steady after a few thousand, and at JetStream's one
	// fsync per message the full backlog would double the scenario's time.
	// Default a quarter of RelayRows, at least 5,000.
	RawRows int
	// GrowthRows is scenario 6's prefilled ledger. Default 1,000,000
	// (quick: 100,000).
	GrowthRows int
	// BacklogRows is scenario 8's backlog. Default 50,000 (quick: 5,000).
	BacklogRows int
	// BacklogRounds is how many times scenario 8 runs each of its three
	// senders, alternately. Default 2 (quick: 1): a River round takes about
	// a minute on a 2-core machine.
	BacklogRounds int
	// SlowRows is scenario 8's backlog against the receiver that answers in
	// SlowLatency: at the bound (workers ÷ latency) it takes SlowRows ×
	// latency ÷ workers. Default 4,000 (quick: 1,000).
	SlowRows int
	// BacklogAlone runs only scenario 8's ticketrelay rounds (no River, no
	// ceiling, no slow receiver): the dispatcher's own figures, for
	// comparing two builds run after run.
	BacklogAlone bool
	// SlowLatency is how long that receiver takes to answer. Default 50ms.
	SlowLatency time.Duration
	// RiverWorkers is the River baseline's MaxWorkers. Default 100 (see
	// docs/decisions/0033).
	RiverWorkers int
	// Only lists the scenarios to run (1-10). Default all.
	Only []int
	// PprofDir, if set, runs the largest scenario-1 level's mcp-front under
	// bench/profwrap and the go-sdk no-op server with a pprof listener, and
	// saves CPU profiles of their measured windows here.
	PprofDir string
	// FrontEnv and FrontArgs are added to every mcp-front's environment and
	// flags (e.g. GOGC=200), DispatcherArgs to every dispatcher's flags: for
	// trying a tuning; the table says when they are set.
	FrontEnv       []string
	FrontArgs      []string
	DispatcherEnv  []string
	DispatcherArgs []string
	// LagRate, if set, replaces scenario 5's pace (half of scenario 7's
	// throughput, the whole pipeline's), in calls per second.
	LagRate float64
	// AB, if set, replaces the scenarios with an A/B comparison of two
	// mcp-front variants (see ABConfig).
	AB *ABConfig
	// Version names the build in the report.
	Version string
	Log     *slog.Logger
	Stdout  io.Writer
}

// WithDefaults fills the zero fields.
func (c Config) WithDefaults() Config {
	pick := func(full, quick time.Duration) time.Duration {
		if c.Quick {
			return quick
		}
		return full
	}
	if c.Warmup == 0 {
		c.Warmup = pick(1500*time.Millisecond, 500*time.Millisecond)
	}
	if c.Settle == 0 {
		c.Settle = pick(500*time.Millisecond, 250*time.Millisecond)
	}
	if c.Measure == 0 {
		c.Measure = pick(2500*time.Millisecond, 2*time.Second)
	}
	if c.Rounds == 0 {
		c.Rounds = map[bool]int{false: 4, true: 1}[c.Quick]
	}
	if len(c.Sessions) == 0 {
		c.Sessions = []int{1, 8, 32}
	}
	if c.Protocol == "" {
		c.Protocol = "2025-11-25"
	}
	if c.RelayRows == 0 {
		c.RelayRows = map[bool]int{false: 100_000, true: 10_000}[c.Quick]
	}
	if c.RawRows == 0 {
		c.RawRows = min(c.RelayRows, max(5_000, c.RelayRows/4))
	}
	if c.GrowthRows == 0 {
		c.GrowthRows = map[bool]int{false: 1_000_000, true: 100_000}[c.Quick]
	}
	if c.BacklogRows == 0 {
		c.BacklogRows = map[bool]int{false: 50_000, true: 5_000}[c.Quick]
	}
	if c.BacklogRounds == 0 {
		c.BacklogRounds = map[bool]int{false: 2, true: 1}[c.Quick]
	}
	if c.SlowRows == 0 {
		c.SlowRows = map[bool]int{false: 4_000, true: 1_000}[c.Quick]
	}
	if c.SlowLatency == 0 {
		c.SlowLatency = 50 * time.Millisecond
	}
	if c.RiverWorkers == 0 {
		c.RiverWorkers = 100
	}
	if len(c.Only) == 0 {
		c.Only = slices.Clone(allScenarios)
	}
	if c.Version == "" {
		c.Version = "dev"
	}
	if c.Log == nil {
		c.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if c.Stdout == nil {
		c.Stdout = io.Discard
	}
	return c
}

// allScenarios are the scenarios of a whole run.
var allScenarios = []int{1, 2, 3, 4, 5, 6, 7, 8, clusterScenario, signInScenario, consoleScenario, searchScenario, fingerprintScenario, commentScenario}

func (c Config) validate() error {
	if c.BinDir == "" {
		return errors.New("bench: no binary directory")
	}
	if c.BacklogRows < 1 || c.BacklogRounds < 1 || c.SlowRows < 1 || c.SlowLatency < 0 || c.RiverWorkers < 1 {
		return fmt.Errorf("bench: invalid config: backlog rows %d, backlog rounds %d, slow rows %d, slow latency %s, River workers %d",
			c.BacklogRows, c.BacklogRounds, c.SlowRows, c.SlowLatency, c.RiverWorkers)
	}
	if c.Warmup < 0 || c.Settle < 0 || c.Measure <= 0 || c.Rounds < 1 || c.RelayRows < 1 || c.RawRows < 1 || c.GrowthRows < 1 {
		return fmt.Errorf("bench: invalid config: warmup %s, measure %s, rounds %d, relay rows %d, growth rows %d",
			c.Warmup, c.Measure, c.Rounds, c.RelayRows, c.GrowthRows)
	}
	for _, n := range c.Sessions {
		if n < 1 || n > 1024 {
			return fmt.Errorf("bench: session count %d out of range 1-1024", n)
		}
	}
	for _, s := range c.Only {
		if !slices.Contains(allScenarios, s) {
			return fmt.Errorf("bench: there is no scenario %d (1-%d)", s, slices.Max(allScenarios))
		}
	}
	return nil
}

func (c Config) wants(scenarios ...int) bool {
	for _, s := range scenarios {
		if slices.Contains(c.Only, s) {
			return true
		}
	}
	return false
}

func (c Config) maxSessions() int { return slices.Max(c.Sessions) }

// ABConfig compares two mcp-front variants, A (the baseline) and B, with
// create_ticket at the largest session count, alternately, round by round,
// on two fronts that run side by side: for measuring a proposed change
// (a patched build in another bin directory, an environment variable such as
// GOGC, a flag) with the same noise on both sides.
type ABConfig struct {
	BinA, BinB   string   // mcp-front binaries; default the one in BinDir
	EnvA, EnvB   []string // added to each side's environment
	ArgsA, ArgsB []string // added to each side's flags
	// Rows prefills both ledgers (as scenario 6 does) before the rounds.
	Rows int
	// Delivery compares two dispatcher variants instead (BinA, BinB are
	// dispatcher binaries): scenario 8's backlog drained by each,
	// alternately, BacklogRounds times.
	Delivery bool
}
