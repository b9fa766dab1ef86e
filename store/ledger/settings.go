package ledger

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"

	"ticketrelay/request"
)

// ErrKeyNamespaceChanged: the dispatcher was started with another dedupe key
// namespace than the one requests on their way were sent under.
var ErrKeyNamespaceChanged = errors.New("ledger: the dedupe key namespace changed while requests are on their way")

// UseKeyNamespace records ns as the namespace of the dedupe keys sent
// downstream (downstream.Key). A key is derived again on every attempt; a
// request already sent under the old namespace and sent again under the new
// one carries another key, and a downstream that dedupes by key creates it
// twice. So the namespace may change only while no request will be sent
// again by itself: none waits for its first attempt or a retry. Otherwise
// UseKeyNamespace changes nothing and returns ErrKeyNamespaceChanged with
// the counts. Failed requests are not counted (they are sent again only by
// an operator's redrive, which the error's text warns about).
func (l *Ledger) UseKeyNamespace(ctx context.Context, ns string) error {
	return l.w.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		// Dispatchers on other data directories share this ledger and its
		// consumers: one may take over another's retry.
		var holder, other string
		err := tx.QueryRowContext(ctx, `SELECT holder, key_namespace FROM dispatchers WHERE seen_at >= ? AND key_namespace != ? LIMIT 1`,
			l.now().Add(-request.PresenceFresh).UnixNano(), ns).Scan(&holder, &other)
		switch {
		case err == nil:
			return fmt.Errorf("%w: dispatcher %s runs with key_namespace %q, this one has %q: the dispatchers of one ledger "+
				"take over each other's retries, and must send the same keys", ErrKeyNamespaceChanged, holder, other, ns)
		case !errors.Is(err, sql.ErrNoRows):
			return fmt.Errorf("ledger: read running dispatchers: %w", err)
		}
		var old string
		err = tx.QueryRowContext(ctx, `SELECT value FROM settings WHERE name = 'key_namespace'`).Scan(&old)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			// First start with this ledger (or with a ledger from before the
			// setting was kept): nothing to compare with.
		case err != nil:
			return fmt.Errorf("ledger: read the key namespace: %w", err)
		case old == ns:
			return nil
		default:
			var waiting int
			if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM requests r LEFT JOIN deliveries d ON d.id = r.id
				WHERE d.id IS NULL OR d.state IN (?, ?)`, request.DeliveryAttempting, string(request.StatusRetrying)).Scan(&waiting); err != nil {
				return fmt.Errorf("ledger: count requests on their way: %w", err)
			}
			if waiting > 0 {
				return fmt.Errorf("%w: key_namespace was %q and is now %q, and %d requests are still on their way: sent again "+
					"under the new namespace they would carry other dedupe keys, and a downstream could create them twice. "+
					"Set key_namespace back until they are delivered (find_request reports each), then change it "+
					"(failed requests redriven after the change are sent under the new keys too)", ErrKeyNamespaceChanged, old, ns, waiting)
			}
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO settings (name, value) VALUES ('key_namespace', ?)
			ON CONFLICT(name) DO UPDATE SET value = excluded.value`, ns)
		return err
	})
}

// ID is the ledger's own id: made at random the first time it is asked
// for and kept in the file, so it names this ledger (and the host that
// keeps it) for as long as the file lives. A dispatcher marks a
// single-host installation's stream with it, so that a second host with
// a ledger of its own cannot take the stream's messages for its own.
func (l *Ledger) ID(ctx context.Context) (string, error) {
	var id string
	err := l.w.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		b := make([]byte, 8)
		rand.Read(b)
		if _, err := tx.ExecContext(ctx, `INSERT INTO settings (name, value) VALUES ('ledger_id', ?) ON CONFLICT(name) DO NOTHING`,
			hex.EncodeToString(b)); err != nil {
			return err
		}
		return tx.QueryRowContext(ctx, `SELECT value FROM settings WHERE name = 'ledger_id'`).Scan(&id)
	})
	if err != nil {
		return "", fmt.Errorf("ledger: id: %w", err)
	}
	return id, nil
}
