package ledger

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"time"

	"ticketrelay/request"
	"ticketrelay/store/outbox"
)

// Redrive puts a failed request back into delivery: its delivery record is
// reset (attempts from zero) and its message is published again under a new
// message id. The dedupe key sent downstream is unchanged.
func (l *Ledger) Redrive(ctx context.Context, requestID string) error {
	return l.w.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		return l.redriveTx(ctx, tx, requestID)
	})
}

func (l *Ledger) redriveTx(ctx context.Context, tx *sql.Tx, requestID string) error {
	id, state, err := deliveryState(ctx, tx, requestID)
	if errors.Is(err, sql.ErrNoRows) {
		switch ok, err := holds(ctx, tx, requestID); {
		case err != nil:
			return fmt.Errorf("ledger: redrive %s: %w", requestID, err)
		case !ok:
			return fmt.Errorf("%w: %s", request.ErrNotFound, requestID)
		}
		return fmt.Errorf("%w: %s has no delivery record yet (it is still on its way)", request.ErrState, requestID)
	}
	if err != nil {
		return fmt.Errorf("ledger: redrive %s: %w", requestID, err)
	}
	if request.Status(state) != request.StatusFailed {
		return fmt.Errorf("%w: %s is %s; only failed requests can be redriven", request.ErrState, requestID, state)
	}
	if _, err := tx.ExecContext(ctx, `UPDATE deliveries SET state = ?, attempts = 0, throttled = 0, next_attempt_at = NULL,
		last_error = ?, failure = '', updated_at = ?, version = version + 1 WHERE id = ?`,
		string(request.StatusRetrying), "redriven by an operator after: "+state, l.now().UnixNano(), id); err != nil {
		return fmt.Errorf("ledger: redrive %s: %w", requestID, err)
	}
	return outbox.RedriveTx(ctx, tx, id)
}

// deliveryState reads the ledger row id and the delivery state of
// requestID; sql.ErrNoRows if it has no delivery record.
func deliveryState(ctx context.Context, tx *sql.Tx, requestID string) (id int64, state string, err error) {
	err = tx.QueryRowContext(ctx, `SELECT d.id, d.state FROM requests r JOIN deliveries d ON d.id = r.id WHERE r.request_id = ?`,
		requestID).Scan(&id, &state)
	return id, state, err
}

// RedriveFailed redrives every failed request (of target, if not empty) and
// returns their ids.
func (l *Ledger) RedriveFailed(ctx context.Context, target string) ([]string, error) {
	var ids []string
	err := l.w.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		var err error
		ids, err = column[string](tx.QueryContext(ctx, `SELECT r.request_id FROM deliveries d JOIN requests r ON r.id = d.id
			WHERE d.state = ? AND (? = '' OR d.target = ?) ORDER BY d.updated_at`,
			string(request.StatusFailed), target, target))
		if err != nil {
			return err
		}
		for _, id := range ids {
			if err := l.redriveTx(ctx, tx, id); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("ledger: redrive failed requests: %w", err)
	}
	return ids, nil
}

// Resolve settles an uncertain request after an operator checked the
// downstream by hand: delivered (with the id found there) or failed.
func (l *Ledger) Resolve(ctx context.Context, requestID string, delivered bool, externalID string) error {
	return l.w.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		id, state, err := deliveryState(ctx, tx, requestID)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("%w: %s has no delivery record", request.ErrNotFound, requestID)
		}
		if err != nil {
			return err
		}
		if request.Status(state) != request.StatusUncertain {
			return fmt.Errorf("%w: %s is %s; only uncertain requests can be resolved", request.ErrState, requestID, state)
		}
		newState, msg, failure := string(request.StatusFailed), "settled as not delivered by an operator", request.FailureSettled
		if delivered {
			newState, msg, failure = string(request.StatusDelivered), "", request.FailureUnknown
		}
		_, err = tx.ExecContext(ctx, `UPDATE deliveries SET state = ?, external_id = ?, last_error = ?, failure = ?, next_attempt_at = NULL,
			updated_at = ?, version = version + 1 WHERE id = ?`, newState, externalID, msg, string(failure), l.now().UnixNano(), id)
		return err
	})
}

// TargetCounts is the delivery picture of one target.
type TargetCounts struct {
	Target string `json:"target"`
	// Waiting: accepted and not attempted yet (queued, published, or held
	// up); no delivery record.
	Waiting   int `json:"waiting"`
	Retrying  int `json:"retrying"`
	Failed    int `json:"failed"`
	Uncertain int `json:"uncertain"`
	Delivered int `json:"delivered"`
	InFlight  int `json:"in_flight"` // attempting
	// Served: a running dispatcher delivers to the target.
	Served bool `json:"served"`
}

// Summary is what `dispatcher status` prints.
type Summary struct {
	Backlog     int64
	OldestAge   time.Duration
	Dispatchers int // running (see Presence)
	Targets     []TargetCounts
	Uncertain   []request.Report
}

// Summarize reads the backlog, the per-target counts and the uncertain requests.
func (l *Ledger) Summarize(ctx context.Context) (Summary, error) {
	s, err := l.Counts(ctx)
	if err != nil {
		return s, err
	}
	s.Uncertain, err = l.uncertain(ctx)
	return s, err
}

// Counts is Summarize without the uncertain requests: the backlog, the
// running dispatchers and the per-target counts.
func (l *Ledger) Counts(ctx context.Context) (Summary, error) {
	var s Summary
	n, oldest, err := outbox.Backlog(ctx, l.db.Reader())
	if err != nil {
		return s, err
	}
	s.Backlog = n
	if !oldest.IsZero() {
		s.OldestAge = l.now().Sub(oldest)
	}
	counts, err := l.countByTarget(ctx, "request_counts")
	if err != nil {
		return s, fmt.Errorf("ledger: summarize: %w", err)
	}
	served, err := l.Served(ctx)
	if err != nil {
		return s, err
	}
	s.Dispatchers = served.Dispatchers
	for t := range served.Targets {
		counts.of(t)
	}
	slices.Sort(counts.order)
	for _, t := range counts.order {
		tc := counts.byTarget[t]
		tc.Served = served.Serves(t)
		s.Targets = append(s.Targets, *tc)
	}
	return s, nil
}

// targetCounts collects TargetCounts by target, in the order first seen.
type targetCounts struct {
	byTarget map[string]*TargetCounts
	order    []string
}

func (c *targetCounts) of(target string) *TargetCounts {
	tc := c.byTarget[target]
	if tc == nil {
		tc = &TargetCounts{Target: target}
		c.byTarget[target] = tc
		c.order = append(c.order, target)
	}
	return tc
}

// countByTarget counts the requests of each target by where they stand,
// from table: request_counts (this ledger's) or cluster_counts (the
// cluster record's copy).
func (l *Ledger) countByTarget(ctx context.Context, table string) (*targetCounts, error) {
	// Kept on write (request_counts, see counts.go): a few rows, however
	// large the ledger.
	rows, err := l.db.Reader().QueryContext(ctx, `SELECT target, shown, n FROM `+table+` WHERE n != 0`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	counts := &targetCounts{byTarget: map[string]*TargetCounts{}}
	for rows.Next() {
		var target, state string
		var c int
		if err := rows.Scan(&target, &state, &c); err != nil {
			return nil, err
		}
		tc := counts.of(target)
		switch state {
		case "waiting":
			tc.Waiting = c
		case string(request.StatusRetrying):
			tc.Retrying = c
		case string(request.StatusFailed):
			tc.Failed = c
		case string(request.StatusUncertain):
			tc.Uncertain = c
		case string(request.StatusDelivered):
			tc.Delivered = c
		case request.DeliveryAttempting:
			tc.InFlight = c
		}
	}
	return counts, rows.Err()
}

// uncertain reads the status of the (first thousand) uncertain requests,
// oldest first.
func (l *Ledger) uncertain(ctx context.Context) ([]request.Report, error) {
	rows, err := l.db.Reader().QueryContext(ctx, `SELECT r.request_id FROM deliveries d JOIN requests r ON r.id = d.id
		WHERE d.state = ? ORDER BY d.updated_at LIMIT 1000`, string(request.StatusUncertain))
	if err != nil {
		return nil, err
	}
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return nil, err
		}
		ids = append(ids, id)
	}
	rows.Close()
	var out []request.Report
	for _, id := range ids {
		st, err := l.FindScoped(ctx, id)
		if err != nil {
			return nil, err
		}
		out = append(out, st)
	}
	return out, nil
}
