package bench

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
	"time"

	"ticketrelay/request"
	"ticketrelay/store"
	"ticketrelay/store/outbox"
	"ticketrelay/ticket"
)

// prefill is a bulk load of accepted requests straight into a ledger file:
// ledger rows (with their tickets) and outbox rows shaped like the ones create_ticket
// writes (random UUID-sized request ids, the same payload and result
// sizes). The file and its schema come from the ledger's own Open; the rows
// go in with INSERT … SELECT statements on a connection tuned for a bulk
// load, so that a million rows take well under a minute.
type prefill struct {
	path      string
	rows      int
	target    string // the subject is tickets.<target>
	published bool   // mark the outbox rows as already published
	chunk     int    // rows per transaction; default 100,000
}

func (p prefill) run(ctx context.Context) (time.Duration, error) {
	start := time.Now()
	ldb, err := store.Open(ctx, p.path)
	if err != nil {
		return 0, err
	}
	if err := ldb.Close(); err != nil {
		return 0, err
	}
	// Nobody else has the file open: no journal, no fsync, and reads through
	// mmap (with SQLite's 2 MB page cache the load re-reads evicted pages
	// with a syscall each). The servers open it afterwards with their own
	// settings.
	q := url.Values{}
	q.Add("_pragma", "journal_mode(OFF)")
	q.Add("_pragma", "synchronous(OFF)")
	q.Add("_pragma", "mmap_size(4294967296)")
	db, err := sql.Open("sqlite", "file:"+filepath.ToSlash(p.path)+"?"+q.Encode())
	if err != nil {
		return 0, err
	}
	defer db.Close()
	db.SetMaxOpenConns(1)

	result, payload, err := templates(p.target)
	if err != nil {
		return 0, err
	}
	chunk := p.chunk
	if chunk <= 0 {
		chunk = 100_000
	}
	base := time.Now().Add(-24 * time.Hour).UnixNano()
	for done := 0; done < p.rows; done += chunk {
		n := min(chunk, p.rows-done)
		lo := base + int64(done)*int64(time.Microsecond)
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return 0, err
		}
		if err := p.insertChunk(ctx, tx, n, lo, result, payload); err != nil {
			tx.Rollback()
			return 0, fmt.Errorf("bench: prefill %s rows %d-%d: %w", p.path, done, done+n, err)
		}
		if err := tx.Commit(); err != nil {
			return 0, err
		}
	}
	// Back to the ledger's journal mode, which the file remembers.
	if _, err := db.ExecContext(ctx, "PRAGMA journal_mode=WAL"); err != nil {
		return 0, err
	}
	return time.Since(start), db.Close()
}

// insertChunk adds n requests created at lo, lo+1µs, …. Their ids follow
// the file's last one, and within the chunk the random request ids are
// numbered in sort order, so that the chunk walks each B-tree once.
func (p prefill) insertChunk(ctx context.Context, tx *sql.Tx, n int, lo int64, result, payload [3]string) error {
	if _, err := tx.ExecContext(ctx, `CREATE TEMP TABLE IF NOT EXISTS chunk (i INTEGER PRIMARY KEY, rid TEXT NOT NULL)`); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM temp.chunk`); err != nil {
		return err
	}
	// Random request ids (UUID-sized), so the B-trees hold keys spread as
	// they are under real load; the ticket id is derived from it.
	_, err := tx.ExecContext(ctx, `
		WITH RECURSIVE c(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM c WHERE i < ?1 - 1),
		r(rid) AS (SELECT lower(hex(randomblob(18))) FROM c)
		INSERT INTO temp.chunk (i, rid) SELECT row_number() OVER (ORDER BY rid) - 1, rid FROM r`, n)
	if err != nil {
		return fmt.Errorf("ids: %w", err)
	}
	var base int64
	if err := tx.QueryRowContext(ctx, `SELECT coalesce(max(id), 0) + 1 FROM requests`).Scan(&base); err != nil {
		return err
	}
	_, err = tx.ExecContext(ctx, `
		INSERT INTO requests (id, request_id, tool, target, args_hash, ticket_id, result, created_at, title, body, priority, labels)
		SELECT ?7 + i, rid, 'create_ticket', ?1, lower(hex(randomblob(32))), 'tkt_' || substr(rid, 1, 21),
			?2 || rid || ?3 || 'tkt_' || substr(rid, 1, 21) || ?4, ?5 + i * 1000,
			'Nightly export failed (prefilled ' || i || ')', ?6, 'normal', '["export","nightly"]'
		FROM temp.chunk ORDER BY i`,
		p.target, result[0], result[1], result[2], lo, sampleBody, base)
	if err != nil {
		return fmt.Errorf("requests: %w", err)
	}
	published := any(nil)
	if p.published {
		published = int64(1_000_000) // 1ms after the commit
	}
	_, err = tx.ExecContext(ctx, `
		INSERT INTO outbox (id, request_id, subject, payload, created_at, published_at)
		SELECT ?7 + i, rid, ?1, CAST(?2 || rid || ?3 || 'tkt_' || substr(rid, 1, 21) || ?4 AS BLOB), ?5 + i * 1000, ?5 + i * 1000 + ?6
		FROM temp.chunk ORDER BY i`,
		outbox.SubjectFor(p.target), payload[0], payload[1], payload[2], lo, published, base)
	if err != nil {
		return fmt.Errorf("outbox: %w", err)
	}
	return nil
}

// templates are the stored result and the outbox payload of a typical
// request, cut around the request id and the ticket id.
func templates(target string) (result, payload [3]string, err error) {
	const rid, tid = "\x00RID\x00", "\x00TID\x00"
	now := time.Now().UTC()
	res, err := json.Marshal(request.Result{RequestID: rid, TicketID: tid, Target: target, Status: request.StatusQueued, CreatedAt: now})
	if err != nil {
		return result, payload, err
	}
	pl, err := json.Marshal(ticket.Ref{RequestID: rid, TicketID: tid})
	if err != nil {
		return result, payload, err
	}
	cut := func(s string) (out [3]string, err error) {
		a, rest, ok1 := strings.Cut(s, jsonEscaped(rid))
		b, c, ok2 := strings.Cut(rest, jsonEscaped(tid))
		if !ok1 || !ok2 {
			return out, fmt.Errorf("bench: template %q lacks its placeholders", s)
		}
		return [3]string{a, b, c}, nil
	}
	if result, err = cut(string(res)); err != nil {
		return result, payload, err
	}
	payload, err = cut(string(pl))
	return result, payload, err
}

func jsonEscaped(s string) string {
	b, _ := json.Marshal(s)
	return string(b[1 : len(b)-1])
}
