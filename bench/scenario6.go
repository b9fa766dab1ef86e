package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// scenario6 compares create_ticket on a ledger that already holds many rows
// with an empty one, alternately, with n sessions each.
func (r *runner) scenario6(ctx context.Context, n int) error {
	rows := r.cfg.GrowthRows
	emptyDir, err := r.mkdir("s6-empty")
	if err != nil {
		return err
	}
	fullDir, err := r.mkdir("s6-full")
	if err != nil {
		return err
	}
	dbPath := filepath.Join(fullDir, "tickets.db")
	took, err := prefill{path: dbPath, rows: rows, target: "local", published: true}.run(ctx)
	if err != nil {
		return err
	}
	var size int64
	for _, suffix := range []string{"", "-wal"} {
		if fi, err := os.Stat(dbPath + suffix); err == nil {
			size += fi.Size()
		}
	}
	r.log.Info("ledger prefilled", "rows", rows, "took", took.Round(time.Millisecond), "bytes", size)

	fe, err := r.startFront(ctx, "mcp-front-empty", emptyDir, false)
	if err != nil {
		return err
	}
	defer fe.stop()
	ff, err := r.startFront(ctx, "mcp-front-full", fullDir, false)
	if err != nil {
		return err
	}
	defer ff.stop()
	se, err := connect(ctx, fe.mcpURL(), r.cfg.Protocol, n)
	if err != nil {
		return err
	}
	defer se.close()
	sf, err := connect(ctx, ff.mcpURL(), r.cfg.Protocol, n)
	if err != nil {
		return err
	}
	defer sf.close()
	if err := r.warm(ctx, se, createTool); err != nil {
		return err
	}
	if err := r.warm(ctx, sf, createTool); err != nil {
		return err
	}
	empty, full := &outcome{}, &outcome{}
	for range r.cfg.Rounds {
		o, err := se.run(ctx, r.timed(createTool, &freshSource{}, fe))
		if err != nil {
			return err
		}
		empty.merge(o)
		if o, err = sf.run(ctx, r.timed(createTool, &freshSource{}, ff)); err != nil {
			return err
		}
		full.merge(o)
	}
	rt := ratio(full.throughput(), empty.throughput())
	result := verdict(rt >= 0.9)
	if empty.errors+full.errors > 0 {
		result = "ERR"
	}
	r.rep.add(row{"6", fmt.Sprintf("create_ticket on a %s-row ledger, %d sessions", count3(rows), n),
		fmt.Sprintf("as scenario 1; ledger prefilled in-process (%s, %.0f MB file); %s", took.Round(time.Second), float64(size)/(1<<20), r.rounds()),
		perSec(full.throughput()), perSec(empty.throughput()) + " empty ledger", times(rt), "≥ 0.9×", result})
	r.rep.detail("%s", describe(fmt.Sprintf("6 create_ticket @%d, %d rows", n, rows), full, "mcp-front"))
	r.rep.detail("%s", describe(fmt.Sprintf("6 create_ticket @%d, empty ledger", n), empty, "mcp-front"))
	se.close()
	sf.close()
	return stopAll(fe, ff)
}

// count3 writes n with thousands separators.
func count3(n int) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
