package bench

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"ticketrelay/store"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// searchScenario measures search_tickets on a big ledger and what the
// full-text index costs create_ticket.
const searchScenario = 12

// searchQueries are what agents look for before filing, on the prefilled
// ledger (prefill: every title "Nightly export failed (prefilled N)", the
// same body): words every ticket holds, the worst case for ranking; a
// number a few tickets hold; words none holds.
var searchQueries = []string{
	"nightly export failed",
	"export deadline exceeded worker",
	"upstream API answered 503",
	"prefilled 52341",
	"dashboard numbers 4711 prefilled 777",
	"kubernetes pod evicted",
}

// searchSessions is how many agents search at once: the latency figure is
// about one search, not about a queue on this machine's two cores.
const searchSessions = 4

// scenario10 measures search_tickets' latency on a ledger of GrowthRows
// tickets, and create_ticket's throughput on a ledger with the full-text
// index against one whose index triggers were dropped, alternately, with
// n sessions each.
func (r *runner) scenario12(ctx context.Context, n int) error {
	rows := r.cfg.GrowthRows
	fullDir, err := r.mkdir("s12-full")
	if err != nil {
		return err
	}
	took, err := prefill{path: filepath.Join(fullDir, "tickets.db"), rows: rows, target: "local", published: true}.run(ctx)
	if err != nil {
		return err
	}
	r.log.Info("ledger prefilled and indexed", "rows", rows, "took", took.Round(time.Millisecond))
	ff, err := r.startFront(ctx, "mcp-front-search", fullDir, false)
	if err != nil {
		return err
	}
	defer ff.stop()
	ss, err := connect(ctx, ff.mcpURL(), r.cfg.Protocol, searchSessions)
	if err != nil {
		return err
	}
	defer ss.close()
	if _, err := searchLoad(ctx, ss, r.cfg.Warmup); err != nil { // page cache and heaps settle
		return err
	}
	// One agent searching, the figure; then searchSessions at once, for
	// what a queue on this machine adds.
	one := &sessions{list: ss.list[:1]}
	for _, s := range []*sessions{one, ss} {
		var lat []time.Duration
		var window time.Duration
		for range r.cfg.Rounds {
			l, err := searchLoad(ctx, s, r.cfg.Measure)
			if err != nil {
				return err
			}
			lat, window = append(lat, l...), window+r.cfg.Measure
		}
		lat = sortDurations(lat)
		p99 := percentile(lat, 99)
		target, result := "≤ 50 ms", verdict(p99 <= 50*time.Millisecond)
		if len(s.list) > 1 {
			target, result = "—", "info"
		}
		r.rep.add(row{"12a", fmt.Sprintf("search_tickets p99 on a %s-ticket ledger, %d session(s)", count3(rows), len(s.list)),
			fmt.Sprintf("%d queries from all-match to no-match, limit 10, back to back; ledger prefilled and indexed in-process (%s); %d×%s windows",
				len(searchQueries), took.Round(time.Second), r.cfg.Rounds, r.cfg.Measure),
			ms(p99), fmt.Sprintf("p50 %s, max %s, %s", ms(percentile(lat, 50)), ms(lat[len(lat)-1]), perSec(float64(len(lat))/window.Seconds())),
			"", target, result})
	}
	ss.close()
	if err := stopAll(ff); err != nil {
		return err
	}
	return r.searchWriteCost(ctx, n)
}

// searchLoad runs the queries round-robin on every session, starting calls
// for d, and returns the latency of each call; a call started in time is
// measured to its end, however long it takes.
func searchLoad(ctx context.Context, s *sessions, d time.Duration) ([]time.Duration, error) {
	end := time.Now().Add(d)
	var mu sync.Mutex
	var lat []time.Duration
	var firstErr error
	var wg sync.WaitGroup
	for i, cs := range s.list {
		wg.Go(func() {
			for q := i; time.Now().Before(end) && ctx.Err() == nil; q++ {
				start := time.Now()
				res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "search_tickets",
					Arguments: map[string]any{"query": searchQueries[q%len(searchQueries)], "limit": 10}})
				took := time.Since(start)
				if err == nil {
					err = checkSearch(res)
				}
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = err
				}
				lat = append(lat, took)
				mu.Unlock()
				if err != nil {
					return
				}
			}
		})
	}
	wg.Wait()
	return lat, firstErr
}

func checkSearch(res *mcp.CallToolResult) error {
	if res.IsError {
		return fmt.Errorf("bench: search_tickets: %v", res.Content)
	}
	var a struct {
		Results []json.RawMessage `json:"results"`
	}
	b, err := json.Marshal(res.StructuredContent)
	if err == nil {
		err = json.Unmarshal(b, &a)
	}
	if err != nil || a.Results == nil {
		return errors.Join(errors.New("bench: search_tickets: no results list"), err)
	}
	return nil
}

// searchWriteCost compares create_ticket on an empty ledger with the
// full-text index and on one whose index triggers were dropped.
func (r *runner) searchWriteCost(ctx context.Context, n int) error {
	withDir, err := r.mkdir("s12-index")
	if err != nil {
		return err
	}
	withoutDir, err := r.mkdir("s12-noindex")
	if err != nil {
		return err
	}
	if err := dropSearchIndex(ctx, filepath.Join(withoutDir, "tickets.db")); err != nil {
		return err
	}
	fw, err := r.startFront(ctx, "mcp-front-index", withDir, false)
	if err != nil {
		return err
	}
	defer fw.stop()
	fo, err := r.startFront(ctx, "mcp-front-noindex", withoutDir, false)
	if err != nil {
		return err
	}
	defer fo.stop()
	sw, err := connect(ctx, fw.mcpURL(), r.cfg.Protocol, n)
	if err != nil {
		return err
	}
	defer sw.close()
	so, err := connect(ctx, fo.mcpURL(), r.cfg.Protocol, n)
	if err != nil {
		return err
	}
	defer so.close()
	for _, s := range []*sessions{sw, so} {
		if err := r.warm(ctx, s, createTool); err != nil {
			return err
		}
	}
	with, without := &outcome{}, &outcome{}
	for range r.cfg.Rounds {
		o, err := so.run(ctx, r.timed(createTool, &freshSource{}, fo))
		if err != nil {
			return err
		}
		without.merge(o)
		if o, err = sw.run(ctx, r.timed(createTool, &freshSource{}, fw)); err != nil {
			return err
		}
		with.merge(o)
	}
	rt := ratio(with.throughput(), without.throughput())
	result := verdict(rt >= 0.95)
	if with.errors+without.errors > 0 {
		result = "ERR"
	}
	r.rep.add(row{"12b", fmt.Sprintf("create_ticket with the full-text index, %d sessions", n),
		"as scenario 1; baseline: the same ledger with the index's triggers dropped; " + r.rounds(),
		perSec(with.throughput()), perSec(without.throughput()) + " without the index", times(rt), "≥ 0.95×", result})
	r.rep.detail("%s", describe(fmt.Sprintf("12b create_ticket @%d, full-text index", n), with, "mcp-front"))
	r.rep.detail("%s", describe(fmt.Sprintf("12b create_ticket @%d, no index", n), without, "mcp-front"))
	sw.close()
	so.close()
	return stopAll(fw, fo)
}

// dropSearchIndex makes the ledger at path (created here) one whose
// creates write no index entries: the baseline of the write cost.
func dropSearchIndex(ctx context.Context, path string) error {
	ldb, err := store.Open(ctx, path)
	if err != nil {
		return err
	}
	if err := ldb.Close(); err != nil {
		return err
	}
	db, err := sql.Open("sqlite", "file:"+filepath.ToSlash(path))
	if err != nil {
		return err
	}
	defer db.Close()
	for _, trig := range []string{"tickets_fts_insert", "tickets_fts_delete", "tickets_fts_update"} {
		if _, err := db.ExecContext(ctx, "DROP TRIGGER "+trig); err != nil {
			return fmt.Errorf("bench: drop %s: %w", trig, err)
		}
	}
	return nil
}
