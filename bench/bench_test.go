package bench

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/prometheus/client_golang/prometheus"

	"ticketrelay/delivery/downstream"
	"ticketrelay/delivery/downstream/local"
	"ticketrelay/delivery/forwarder"
	"ticketrelay/front/mcptools"
	"ticketrelay/metrics"
	"ticketrelay/request"
	"ticketrelay/store"
	"ticketrelay/store/ledger"
	"ticketrelay/store/outbox"
	"ticketrelay/store/sqlitedb"
	"ticketrelay/ticket"
)

func TestPercentile(t *testing.T) {
	var d []time.Duration
	for i := 100; i >= 1; i-- {
		d = append(d, time.Duration(i)*time.Millisecond)
	}
	sortDurations(d)
	for _, c := range []struct {
		p    float64
		want time.Duration
	}{{50, 50 * time.Millisecond}, {99, 99 * time.Millisecond}, {100, 100 * time.Millisecond}, {0.1, time.Millisecond}} {
		if got := percentile(d, c.p); got != c.want {
			t.Errorf("p%v = %v, want %v", c.p, got, c.want)
		}
	}
	if got := percentile(nil, 99); got != 0 {
		t.Errorf("p99 of nothing = %v", got)
	}
}

// TestTimes: a ratio that two decimals would round onto a target's bound
// gets a third, so the cell never reads "0.90×" beside a MISS of "≥ 0.9×".
func TestTimes(t *testing.T) {
	for x, want := range map[float64]string{
		0.8987: "0.899×", 0.9: "0.90×", 1.5031: "1.503×", 0.52: "0.52×", 15.871: "15.87×", 1.0: "1.00×", 0.996: "0.996×",
	} {
		if got := times(x); got != want {
			t.Errorf("times(%v) = %q, want %q", x, got, want)
		}
	}
}

func TestProcStat(t *testing.T) {
	// A command name with spaces and a parenthesis, as the kernel writes it.
	line := "4242 (my (odd) cmd) S 1 2 3 4 5 6 7 8 9 10 150 25 0 0 20 0 8 0 100 200 300"
	got, err := parseStatCPU([]byte(line))
	if err != nil {
		t.Fatal(err)
	}
	if want := 175 * clockTick; got != want {
		t.Errorf("cpu = %v, want %v", got, want)
	}
	if _, err := parseStatCPU([]byte("4242 (x) S 1 2")); err == nil {
		t.Error("a short stat line parsed")
	}
	// The harness's own process: its CPU time grows and its peak RSS is real.
	before, err := cpuTime(selfPID)
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); ; {
		after, err := cpuTime(selfPID)
		if err != nil {
			t.Fatal(err)
		}
		if after > before {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("CPU time stayed at %v while spinning for 5s", before)
		}
		for i := 0; i < 1_000_000; i++ {
			_ = strings.Repeat("x", i%7)
		}
	}
	rss, err := peakRSS(selfPID)
	if err != nil {
		t.Fatal(err)
	}
	if rss < 1<<20 || rss > 64<<30 {
		t.Errorf("peak RSS %d bytes is implausible", rss)
	}
}

func TestReport(t *testing.T) {
	r := &report{started: time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC), version: "v1", machine: machine{Cores: 2}}
	r.add(row{"1", "create | noop", "32 sessions", "900/s", "1000/s", "0.90×", "≥ 0.9×", "PASS"})
	r.detail("1 create: %d calls", 9000)
	var md, txt strings.Builder
	r.markdown(&md)
	r.text(&txt)
	for _, want := range []string{"| 1 | create \\| noop | 32 sessions | 900/s | 1000/s | 0.90× | ≥ 0.9× | PASS |", "- 1 create: 9000 calls", "2026-11-30"} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("markdown lacks %q:\n%s", want, md.String())
		}
	}
	if !strings.Contains(txt.String(), "create | noop") || !strings.Contains(txt.String(), "PASS") {
		t.Errorf("text table:\n%s", txt.String())
	}
}

// TestPrefill checks that bulk-loaded rows are what the ledger and the
// relay would have written: find_request, the backlog and the payload read
// them as their own.
func TestPrefill(t *testing.T) {
	ctx := t.Context()
	for _, published := range []bool{false, true} {
		path := filepath.Join(t.TempDir(), "tickets.db")
		if _, err := (prefill{path: path, rows: 1200, chunk: 500, target: "local", published: published}).run(ctx); err != nil {
			t.Fatal(err)
		}
		db, err := store.Open(ctx, path)
		if err != nil {
			t.Fatal(err)
		}
		var n int64
		var rid string
		var payload []byte
		if err := db.Reader().QueryRowContext(ctx, `SELECT count(*) FROM requests`).Scan(&n); err != nil || n != 1200 {
			t.Fatalf("requests: %d, %v", n, err)
		}
		if err := db.Reader().QueryRowContext(ctx, `SELECT request_id, payload FROM outbox ORDER BY id LIMIT 1 OFFSET 789`).Scan(&rid, &payload); err != nil {
			t.Fatal(err)
		}
		var tk ticket.Ticket
		if err := json.Unmarshal(payload, &tk); err != nil || tk.RequestID != rid || tk.ID == "" {
			t.Fatalf("payload of %s: %+v, %v", rid, tk, err)
		}
		backlog, _, err := outbox.Backlog(ctx, db.Reader())
		if err != nil {
			t.Fatal(err)
		}
		w := sqlitedb.NewWriter(db, slog.New(slog.NewTextHandler(io.Discard, nil)), metrics.NewFront(prometheus.NewRegistry()).Writer)
		st, err := ledger.New(db, w, time.Now).Find(ctx, "", rid)
		if err != nil {
			t.Fatal(err)
		}
		wantBacklog, wantStatus := int64(1200), request.StatusQueued
		if published {
			wantBacklog, wantStatus = 0, request.StatusPublished
		}
		if backlog != wantBacklog || st.Status != wantStatus || st.TicketID != tk.ID {
			t.Errorf("published=%v: backlog %d, find %+v; want backlog %d, status %s, ticket %s", published, backlog, st, wantBacklog, wantStatus, tk.ID)
		}
		w.Close()
		db.Close()
	}
}

// TestLoad drives the real MCP tools (mcptools, real SQLite) over streamable HTTP with
// the load generator: fresh calls to create_ticket and its no-op twin, then
// a replay of the created ones.
func TestLoad(t *testing.T) {
	ctx := t.Context()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	db, err := store.Open(ctx, filepath.Join(t.TempDir(), "tickets.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	m := metrics.NewFront(prometheus.NewRegistry())
	w := sqlitedb.NewWriter(db, log, m.Writer)
	t.Cleanup(w.Close)
	b := mcptools.Binding{Tool: createTool, Target: "local", Capabilities: downstream.Capabilities{DedupeKey: true}}
	srv, err := mcptools.New(mcptools.Config{Bindings: []mcptools.Binding{b}}, ledger.New(db, w, time.Now), m, log)
	if err != nil {
		t.Fatal(err)
	}
	if got := mcptools.AddNoopTool(srv, b, log); got != noopTool {
		t.Fatalf("no-op tool is %q, want %q", got, noopTool)
	}
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	t.Cleanup(hs.Close)
	s, err := connect(ctx, hs.URL, "", 2)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.close)

	run := func(l load) *outcome {
		t.Helper()
		l.measure = 400 * time.Millisecond
		if !l.replayed {
			// A replay of what 500 ms created may take less than this.
			l.warmup = 100 * time.Millisecond
		}
		o, err := s.run(ctx, l)
		if err != nil {
			t.Fatal(err)
		}
		if o.errors > 0 || o.calls == 0 || len(o.lat) == 0 || o.window <= 0 {
			t.Fatalf("%s: %d calls, %d latencies in %v, %d errors (%v)", l.tool, o.calls, len(o.lat), o.window, o.errors, o.firstErr)
		}
		return o
	}
	run(load{tool: noopTool, src: &freshSource{}})
	created := run(load{tool: createTool, src: &freshSource{}})
	var rows int64
	if err := db.Reader().QueryRowContext(ctx, `SELECT count(*) FROM requests`).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != int64(len(created.done)) {
		t.Errorf("%d ledger rows after %d successful creates (the no-op tool must write nothing)", rows, len(created.done))
	}
	replay := run(load{tool: createTool, src: &listSource{list: created.done}, replayed: true})
	if len(replay.done) > len(created.done) {
		t.Errorf("replayed %d calls of a list of %d", len(replay.done), len(created.done))
	}

	// A paced run stops by itself at the end of its window and keeps to
	// its rate.
	paced := run(load{tool: noopTool, src: &freshSource{}, rate: 50})
	if got := paced.throughput(); got > 80 {
		t.Errorf("paced at 50/s, measured %.0f/s", got)
	}

	// A tool error is counted, not hidden.
	o, err := s.run(ctx, load{tool: createTool, src: &listSource{list: []Args{{RequestID: "has space", Title: "x"}}},
		warmup: 0, measure: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if o.errors != 1 || !strings.Contains(o.firstErr.Error(), "request_id") {
		t.Errorf("invalid call: %d errors, first %v", o.errors, o.firstErr)
	}

	// A source that runs out during the warm-up measured nothing: say so.
	_, err = s.run(ctx, load{tool: noopTool, src: &listSource{list: []Args{{RequestID: "warm-only", Title: "x"}}},
		warmup: 300 * time.Millisecond, measure: 100 * time.Millisecond})
	if err == nil || !strings.Contains(err.Error(), "before the measured window") {
		t.Errorf("a source exhausted in the warm-up: err = %v", err)
	}
}

func TestDeliveryLags(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tickets.jsonl")
	created := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var b strings.Builder
	for i, id := range []string{"a", "b", "c"} {
		l := local.Line{Key: id, DeliveredAt: created.Add(time.Duration(i+1) * time.Millisecond),
			Ticket: ticket.Ticket{Request: ticket.Request{RequestID: id}, CreatedAt: created}}
		j, _ := json.Marshal(l)
		b.Write(append(j, '\n'))
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	lags, err := deliveryLags(path, []string{"c", "a"})
	if err != nil {
		t.Fatal(err)
	}
	if len(lags) != 2 || lags[0] != time.Millisecond || lags[1] != 3*time.Millisecond {
		t.Errorf("lags = %v", lags)
	}
	if _, err := deliveryLags(path, []string{"a", "zzz"}); err == nil {
		t.Error("a missing ticket went unnoticed")
	}
}

func TestConfig(t *testing.T) {
	full := Config{BinDir: "bin"}.WithDefaults()
	quick := Config{BinDir: "bin", Quick: true}.WithDefaults()
	if full.GrowthRows != 1_000_000 || full.RelayRows != 100_000 || full.maxSessions() != 32 || full.Rounds != 4 || full.RawRows != 25_000 {
		t.Errorf("full defaults: %+v", full)
	}
	if quick.Measure >= full.Measure || quick.GrowthRows >= full.GrowthRows {
		t.Errorf("quick run is not smaller: %+v", quick)
	}
	if full.BacklogRows != 50_000 || quick.BacklogRows >= full.BacklogRows || quick.BacklogRounds > full.BacklogRounds || quick.SlowRows >= full.SlowRows {
		t.Errorf("scenario 8 defaults: full %+v, quick %+v", full, quick)
	}
	if !full.wants(8) {
		t.Error("scenario 8 is not in the full run")
	}
	if none := slices.Max(allScenarios) + 1; (Config{BinDir: "bin", Only: []int{none}}).WithDefaults().validate() == nil {
		t.Errorf("scenario %d accepted", none)
	}
	if !full.wants(signInScenario) || !full.wants(consoleScenario) || !full.wants(searchScenario) || !full.wants(fingerprintScenario) || !full.wants(commentScenario) {
		t.Error("scenario 10, 11, 12, 13 or 14 is not in the full run")
	}
	if err := (Config{BinDir: "bin", Only: []int{clusterScenario}}).WithDefaults().validate(); err != nil || !full.wants(clusterScenario) {
		t.Errorf("the cluster scenario: %v, in the full run: %v", err, full.wants(clusterScenario))
	}
	if !full.wants(4) || (Config{Only: []int{1}}).wants(4) {
		t.Error("wants")
	}
}

func TestDispatcherWorkers(t *testing.T) {
	for _, c := range []struct {
		args []string
		want int
	}{
		{nil, forwarder.DefaultWorkers},
		{[]string{"-workers", "64"}, 64},
		{[]string{"-log-level", "warn", "--workers=8"}, 8},
		{[]string{"-workers", "0"}, forwarder.DefaultWorkers},
		{[]string{"-max-workers", "5"}, forwarder.DefaultWorkers},
	} {
		r := &runner{cfg: Config{DispatcherArgs: c.args}}
		if got := r.dispatcherWorkers(); got != c.want {
			t.Errorf("%q: %d workers, want %d", c.args, got, c.want)
		}
	}
}

func TestMedian(t *testing.T) {
	ds := func(secs ...float64) []drain {
		var out []drain
		for _, s := range secs {
			out = append(out, drain{tickets: 100, took: time.Duration(s * float64(time.Second))})
		}
		return out
	}
	for _, c := range []struct {
		ds   []drain
		want float64
	}{{ds(1), 100}, {ds(4, 1, 2), 50}, {ds(1, 2), 75}, {nil, 0}} {
		if got := median(c.ds, drain.rate); got != c.want {
			t.Errorf("median of %v = %v, want %v", c.ds, got, c.want)
		}
	}
}

func TestResultName(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{}, "latest.md"},
		{Config{Quick: true}, "latest-quick.md"},
		{Config{Only: []int{8}}, "latest-only-8.md"},
		{Config{Quick: true, Only: []int{4, 8}}, "latest-quick-only-4-8.md"},
		{Config{Only: []int{8}, AB: &ABConfig{}}, "ab.md"},
	} {
		if got := resultName(c.cfg.WithDefaults()); got != c.want {
			t.Errorf("%+v: %s, want %s", c.cfg, got, c.want)
		}
	}
}

func TestBacklogOrder(t *testing.T) {
	for rounds, want := range map[int]string{
		1: "relay river ceiling",
		2: "relay ceiling river ceiling relay",
		3: "relay ceiling river ceiling relay relay river ceiling",
	} {
		if got := strings.Join(backlogOrder(rounds, "relay", "river", "ceiling"), " "); got != want {
			t.Errorf("%d rounds: %s, want %s", rounds, got, want)
		}
	}
}
