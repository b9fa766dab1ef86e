package ledger

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"time"

	"ticketrelay/request"
)

// A dispatcher says, in the ledger, that it runs and which targets it
// delivers to; mcp-front and the audit read it. Without it, a ticket bound
// to a target that no dispatcher serves (mcp-front and the dispatcher given
// different -config files, or no dispatcher running at all) waited as
// "queued" or "published" for ever, and nothing said why.
const (
	// presenceForget is how old an entry is deleted (a crashed
	// dispatcher's, or one stopped too hard to take its own out).
	presenceForget = 24 * time.Hour
)

// blockedPrefix + a dispatcher's holder names, in the settings table, its
// note that it cannot hand requests to the stream: JSON {since, reason}.
// (A setting rather than a column of dispatchers: no migration.)
const blockedPrefix = "stream_blocked:"

type blockedNote struct {
	Since  int64  `json:"since"` // unix nanoseconds
	Reason string `json:"reason"`
}

// Blocked records that this dispatcher cannot hand requests to the stream
// since since, and why: find_request says so of every request on its way
// while the entry is fresh. Unblocked and Withdraw delete the note.
func (p *Presence) Blocked(ctx context.Context, since time.Time, reason string) error {
	b, _ := json.Marshal(blockedNote{Since: since.UnixNano(), Reason: reason}) // always encodes
	err := p.l.w.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO settings (name, value) VALUES (?, ?)
			ON CONFLICT(name) DO UPDATE SET value = excluded.value`, blockedPrefix+p.holder, string(b))
		return err
	})
	p.l.served.forget()
	if err != nil {
		return fmt.Errorf("ledger: note blocked delivery of %s: %w", p.holder, err)
	}
	return nil
}

// Unblocked deletes the note Blocked wrote.
func (p *Presence) Unblocked(ctx context.Context) error {
	err := p.l.w.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `DELETE FROM settings WHERE name = ?`, blockedPrefix+p.holder)
		return err
	})
	p.l.served.forget()
	if err != nil {
		return fmt.Errorf("ledger: clear blocked delivery of %s: %w", p.holder, err)
	}
	return nil
}

// Presence is one dispatcher's entry in the dispatchers table: the
// writes that say it runs, what it serves, and that it cannot reach the
// stream. The service that renews it is maintenance.Presence.
type Presence struct {
	l       *Ledger
	holder  string
	targets string // JSON array, sorted
	ns      string // dedupe key namespace (see UseKeyNamespace)
}

// NewPresence returns the entry of the dispatcher holder delivering to
// targets under the dedupe key namespace ns.
func (l *Ledger) NewPresence(holder string, targets []string, ns string) *Presence {
	t := slices.Sorted(slices.Values(targets))
	if t == nil {
		t = []string{}
	}
	b, _ := json.Marshal(t) // a []string always encodes
	return &Presence{l: l, holder: holder, targets: string(b), ns: ns}
}

// Announce writes the entry (again) and deletes entries nobody renewed for
// a day.
func (p *Presence) Announce(ctx context.Context) error {
	err := p.l.w.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		now := p.l.now()
		if _, err := tx.ExecContext(ctx, `INSERT INTO dispatchers (holder, targets, key_namespace, seen_at) VALUES (?, ?, ?, ?)
			ON CONFLICT(holder) DO UPDATE SET targets = excluded.targets, key_namespace = excluded.key_namespace, seen_at = excluded.seen_at`,
			p.holder, p.targets, p.ns, now.UnixNano()); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM dispatchers WHERE seen_at < ?`, now.Add(-presenceForget).UnixNano()); err != nil {
			return err
		}
		// Notes of dispatchers forgotten above (or that crashed blocked).
		_, err := tx.ExecContext(ctx, `DELETE FROM settings WHERE name LIKE ? || '%' AND substr(name, ?) NOT IN (SELECT holder FROM dispatchers)`,
			blockedPrefix, len(blockedPrefix)+1)
		return err
	})
	p.l.served.forget()
	if err != nil {
		return fmt.Errorf("ledger: announce dispatcher %s: %w", p.holder, err)
	}
	return nil
}

// Withdraw deletes the entry: the dispatcher is stopping.
func (p *Presence) Withdraw(ctx context.Context) error {
	err := p.l.w.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `DELETE FROM dispatchers WHERE holder = ?`, p.holder); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `DELETE FROM settings WHERE name = ?`, blockedPrefix+p.holder)
		return err
	})
	p.l.served.forget()
	if err != nil {
		return fmt.Errorf("ledger: withdraw dispatcher %s: %w", p.holder, err)
	}
	return nil
}

// Served reads what the running dispatchers deliver to.
func (l *Ledger) Served(ctx context.Context) (request.Served, error) {
	s := request.Served{Targets: map[string]bool{}}
	rows, err := l.db.Query(ctx, `SELECT targets FROM dispatchers WHERE seen_at >= ?`,
		l.now().Add(-request.PresenceFresh).UnixNano())
	if err != nil {
		return s, fmt.Errorf("ledger: read dispatchers: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var list string
		if err := rows.Scan(&list); err != nil {
			return s, fmt.Errorf("ledger: read dispatchers: %w", err)
		}
		var targets []string
		if err := json.Unmarshal([]byte(list), &targets); err != nil {
			return s, fmt.Errorf("ledger: read dispatchers: targets %q: %w", list, err)
		}
		s.Dispatchers++
		for _, t := range targets {
			s.Targets[t] = true
		}
	}
	if err := rows.Err(); err != nil {
		return s, fmt.Errorf("ledger: read dispatchers: %w", err)
	}
	rows.Close()
	// A running dispatcher's note that it cannot reach the stream.
	blocked, err := l.db.Query(ctx, `SELECT s.value FROM settings s JOIN dispatchers d ON s.name = ? || d.holder
		WHERE d.seen_at >= ?`, blockedPrefix, l.now().Add(-request.PresenceFresh).UnixNano())
	if err != nil {
		return s, fmt.Errorf("ledger: read blocked dispatchers: %w", err)
	}
	defer blocked.Close()
	for blocked.Next() {
		var v string
		var n blockedNote
		if err := blocked.Scan(&v); err != nil {
			return s, fmt.Errorf("ledger: read blocked dispatchers: %w", err)
		}
		if json.Unmarshal([]byte(v), &n) != nil {
			continue // not a note this version wrote: say nothing rather than fail find_request
		}
		if since := time.Unix(0, n.Since); s.BlockedSince.IsZero() || since.Before(s.BlockedSince) {
			s.BlockedSince, s.BlockedReason = since, n.Reason
		}
	}
	if err := blocked.Err(); err != nil {
		return s, fmt.Errorf("ledger: read blocked dispatchers: %w", err)
	}
	return s, nil
}

// servedCache keeps what Served read for servedCacheFor: Find reads it for
// every request still on its way, and a replayed create answers with Find.
// Entries change every renewal at most; an Announce or Withdraw
// through this ledger forgets it at once.
type servedCache struct {
	mu sync.Mutex
	s  request.Served
	at time.Time // when s was read (the machine's clock: the cache is not a rule)
}

const servedCacheFor = time.Second

func (c *servedCache) forget() {
	c.mu.Lock()
	c.at = time.Time{}
	c.mu.Unlock()
}

// servedRecently is Served, read at most once a second.
func (l *Ledger) servedRecently(ctx context.Context) (request.Served, error) {
	l.served.mu.Lock()
	defer l.served.mu.Unlock()
	if !l.served.at.IsZero() && time.Since(l.served.at) < servedCacheFor {
		return l.served.s, nil
	}
	s, err := l.Served(ctx)
	if err != nil {
		return s, err
	}
	l.served.s, l.served.at = s, time.Now()
	return s, nil
}
