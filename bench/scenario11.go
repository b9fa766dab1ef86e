package bench

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"
)

// consoleScenario is the operator console's (issue 36): its pages over a
// ledger of GrowthRows requests, and the delivery rate while a browser
// keeps refreshing it against the rate while nobody looks.
const consoleScenario = 11

func (r *runner) scenario11(ctx context.Context) error {
	if err := r.consolePages(ctx); err != nil {
		return err
	}
	return r.consoleLoad(ctx)
}

// startConsoleDispatcher starts a dispatcher on dir with its console on
// a free port. Its retention is a month: the prefilled requests were
// accepted a day ago, and the default day's would prune them while they
// are measured.
func (r *runner) startConsoleDispatcher(ctx context.Context, dir string) (*proc, error) {
	args := []string{"-data", dir, "-db", filepath.Join(dir, "tickets.db"),
		"-nats-listen", "127.0.0.1:0", "-metrics-listen", "127.0.0.1:0", "-console-listen", "127.0.0.1:0", "-retention", "720h"}
	return startProc(ctx, "dispatcher", r.bin("dispatcher"), dir, append(args, r.cfg.DispatcherArgs...), r.cfg.DispatcherEnv, "metrics", "console")
}

// consolePages times the console's pages over a prefilled ledger whose
// requests are settled as a long-running one's are: 1 in 100 failed, 1 in
// 100 uncertain, 1 in 100 retrying, the rest delivered.
func (r *runner) consolePages(ctx context.Context) error {
	rows := r.cfg.GrowthRows
	dir, err := r.mkdir("s11-pages")
	if err != nil {
		return err
	}
	dbPath := filepath.Join(dir, "tickets.db")
	took, err := prefill{path: dbPath, rows: rows, target: "local", published: true}.run(ctx)
	if err != nil {
		return err
	}
	db, err := sql.Open("sqlite", "file:"+filepath.ToSlash(dbPath)+"?_pragma=busy_timeout(10000)")
	if err != nil {
		return err
	}
	_, err = db.ExecContext(ctx, `INSERT INTO deliveries (id, target, state, attempts, last_error, failure, updated_at)
		SELECT id, target, CASE id % 100 WHEN 0 THEN 'failed' WHEN 1 THEN 'uncertain' WHEN 2 THEN 'retrying' ELSE 'delivered' END, 1,
			CASE id % 100 WHEN 0 THEN '10 attempts exhausted; last error: transient error (HTTP 503): unavailable'
				WHEN 1 THEN 'attempt 1 ended without an answer' WHEN 2 THEN 'transient error (HTTP 503): unavailable' ELSE '' END,
			CASE id % 100 WHEN 0 THEN 'exhausted' ELSE '' END, created_at
		FROM requests WHERE id % 100000 != 777`)
	// Rare matches: 1 in 100,000 requests waits (no delivery record), and
	// another 1 in 100,000 is a subject's, the only requests it has.
	if err == nil {
		_, err = db.ExecContext(ctx, `UPDATE requests SET subject = 'rare-subject' WHERE id % 100000 = 4242`)
	}
	var first int64
	if err == nil {
		err = db.QueryRowContext(ctx, `SELECT min(created_at) FROM requests`).Scan(&first)
	}
	var mid, someID string
	if err == nil {
		err = db.QueryRowContext(ctx, `SELECT id, request_id FROM requests WHERE id >= (SELECT max(id) / 2 FROM requests) ORDER BY id LIMIT 1`).Scan(&mid, &someID)
	}
	db.Close()
	if err != nil {
		return fmt.Errorf("bench: delivery records: %w", err)
	}
	disp, err := r.startConsoleDispatcher(ctx, dir)
	if err != nil {
		return err
	}
	defer disp.stop()
	base := "http://" + disp.Addr("console")
	// The console's time fields are minutes (UTC): the prefill's requests
	// are all in the minute after start.
	start := time.Unix(0, first).UTC().Truncate(time.Minute)
	minute := func(t time.Time) string { return url.QueryEscape(t.Format("2006-01-02T15:04")) }
	lists := []string{"/requests", "/requests?status=failed", "/requests?status=delivered", "/requests?status=uncertain&target=local",
		"/requests?status=retrying&before=" + mid, "/requests?status=failed&subject=", "/request?id=" + url.QueryEscape(someID),
		// Rare and absent matches, each a walk of the million before 0156.
		"/requests?status=waiting", "/requests?subject=rare-subject", "/requests?status=delivered&subject=rare-subject",
		"/requests?from=" + minute(start.Add(-48*time.Hour)) + "&to=" + minute(start.Add(-24*time.Hour)),
		"/requests?status=failed&to=" + minute(start.Add(time.Minute)), "/requests?q=zebra", "/requests?status=delivered&q=zebra",
		"/requests?q=" + url.QueryEscape(someID), "/requests?target=elsewhere"}
	// The overview reads the counts kept on write (request_counts): each
	// fetch reads them again.
	var listTimes, overviewTimes []time.Duration
	for range 5 * r.cfg.Rounds {
		for _, p := range lists {
			d, err := getPage(ctx, base+p)
			if err != nil {
				return err
			}
			listTimes = append(listTimes, d)
		}
		d, err := getPage(ctx, base+"/")
		if err != nil {
			return err
		}
		overviewTimes = append(overviewTimes, d)
	}
	sortDurations(listTimes)
	sortDurations(overviewTimes)
	p99 := percentile(listTimes, 99)
	r.rep.add(row{"11", fmt.Sprintf("console: a page of requests over %s requests", count3(rows)),
		fmt.Sprintf("dispatcher defaults but -retention 720h; requests lists by status (all, failed, delivered, uncertain of a target, a later page of retrying), rare and absent matches (the 10 waiting among 1,000,000 delivered, a subject with 10 requests alone and delivered, a day before the first request, an old range of failed, a word no ticket holds alone and delivered, a request id, a target no request names) and one request's page, %d times each, one after another",
			5*r.cfg.Rounds),
		"p99 " + ms(p99), "—", "—", "≤ 200 ms", verdict(p99 <= 200*time.Millisecond)})
	op99 := percentile(overviewTimes, 99)
	r.rep.add(row{"11", fmt.Sprintf("console: the overview over %s requests", count3(rows)),
		fmt.Sprintf("as above; the overview (every target's counts by state, kept on write; the uncertain requests; the last errors), %d times, between the lists",
			len(overviewTimes)),
		"p99 " + ms(op99), "—", "—", "≤ 200 ms", verdict(op99 <= 200*time.Millisecond)})
	r.rep.detail("11 pages: ledger of %d requests prefilled in %s; list and request pages p50 %s, p99 %s, max %s (%d pages); overview p50 %s, p99 %s, max %s (%d fetches)",
		rows, took.Round(time.Millisecond), ms(percentile(listTimes, 50)), ms(p99), ms(listTimes[len(listTimes)-1]), len(listTimes),
		ms(percentile(overviewTimes, 50)), ms(op99), ms(overviewTimes[len(overviewTimes)-1]), len(overviewTimes))
	return nil
}

// getPage fetches url and times it until its last byte; anything but 200
// is an error.
func getPage(ctx context.Context, u string) (time.Duration, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return 0, err
	}
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, fmt.Errorf("bench: console %s: %w", u, err)
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	took := time.Since(start)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("bench: console %s: %s", u, resp.Status)
	}
	return took, err
}

// consoleLoad delivers a backlog of BacklogRows to the local target with
// the console closed, then open in a browser that refreshes the overview
// and two lists every second, alternately for twice Rounds rounds: a
// drain lasts a few seconds, too short for Rounds of them to resolve the
// 5% the target allows (decision 0156). The figure is the delivery rate
// from the first delivery to the last.
func (r *runner) consoleLoad(ctx context.Context) error {
	rows := r.cfg.BacklogRows
	var rate [2]float64 // closed, open
	var pages atomic.Int64
	rounds := 2 * r.cfg.Rounds
	for k := range 2 * rounds {
		open := k%2 == 1
		dir, err := r.mkdir(fmt.Sprintf("s11-load-%d", k))
		if err != nil {
			return err
		}
		dbPath := filepath.Join(dir, "tickets.db")
		if _, err := (prefill{path: dbPath, rows: rows, target: "local"}).run(ctx); err != nil {
			return err
		}
		db, err := openReadOnly(dbPath)
		if err != nil {
			return err
		}
		disp, err := r.startConsoleDispatcher(ctx, dir)
		if err != nil {
			db.Close()
			return err
		}
		stop := make(chan struct{})
		var wg sync.WaitGroup
		if open {
			base := "http://" + disp.Addr("console")
			wg.Go(func() {
				t := time.NewTicker(time.Second)
				defer t.Stop()
				for {
					for _, p := range []string{"/", "/requests?status=failed", "/requests"} {
						if _, err := getPage(ctx, base+p); err == nil {
							pages.Add(1)
						}
					}
					select {
					case <-stop:
						return
					case <-ctx.Done():
						return
					case <-t.C:
					}
				}
			})
		}
		err = waitFor(ctx, 10*time.Minute, "delivering the backlog", func() (bool, error) {
			n, err := count(ctx, db, `SELECT count(*) FROM deliveries WHERE state = 'delivered'`)
			return n >= int64(rows), err
		})
		close(stop)
		wg.Wait()
		var lo, hi int64
		if err == nil {
			err = db.QueryRowContext(ctx, `SELECT min(updated_at), max(updated_at) FROM deliveries`).Scan(&lo, &hi)
		}
		if serr := disp.stop(); err == nil {
			err = serr
		}
		db.Close()
		if err != nil {
			return err
		}
		if hi <= lo {
			return fmt.Errorf("bench: console round %d: no span of deliveries", k)
		}
		rate[map[bool]int{false: 0, true: 1}[open]] += float64(rows) / time.Duration(hi-lo).Seconds() / float64(rounds)
	}
	rt := ratio(rate[1], rate[0])
	r.rep.add(row{"11", fmt.Sprintf("console: delivering a %s-ticket backlog to the local target while the console refreshes", count3(rows)),
		fmt.Sprintf("dispatcher defaults but -retention 720h; a browser-like client fetching the overview and two lists every second; %d rounds alternating open and closed", rounds),
		perSec(rate[1]), perSec(rate[0]) + " console closed", times(rt), "≥ 0.95×", verdict(rt >= 0.95)})
	r.rep.detail("11 load: %d console pages fetched during the open rounds", pages.Load())
	return nil
}
