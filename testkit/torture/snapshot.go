package torture

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"

	_ "modernc.org/sqlite" // the "sqlite" driver
)

// Row is what the SQLite file holds about one request: its ledger row,
// ticket, outbox row and delivery record.
type Row struct {
	RequestID string `json:"request_id"`
	Tool      string `json:"tool"`
	Target    string `json:"target"`
	TicketID  string `json:"ticket_id"`
	// Seq is the ledger row's id: the order in which the ledger accepted
	// requests.
	Seq int64 `json:"seq"`
	// Kind is "" for a create, else comment or update; OnRequest is the
	// scoped id of the create a comment or an update acts on.
	Kind      string `json:"kind,omitempty"`
	OnRequest string `json:"on_request,omitempty"`
	// From the tickets table ("" and false without a row).
	HasTicket bool   `json:"has_ticket"`
	Title     string `json:"title"`
	// From the outbox.
	HasOutbox bool   `json:"has_outbox"`
	Subject   string `json:"subject"`
	Published bool   `json:"published"`
	// Generation counts republishes under a new message id: an operator
	// redrive or the stream audit.
	Generation int `json:"generation"`
	// StreamSeq is where the stream stored the message (0: not known).
	StreamSeq uint64 `json:"stream_seq,omitempty"`
	// From the deliveries table (nil: none yet).
	Delivery *DeliveryRow `json:"delivery,omitempty"`
}

// DeliveryRow is a row of the deliveries table.
type DeliveryRow struct {
	Target     string `json:"target"`
	State      string `json:"state"`
	Attempts   int    `json:"attempts"`
	ExternalID string `json:"external_id"`
	LastError  string `json:"last_error"`
}

// Snapshot is the SQLite file's content at one moment.
type Snapshot struct {
	Rows map[string]*Row `json:"rows"` // by request id
	// Orphans are rows of tickets, outbox or deliveries without a ledger row.
	Orphans []string `json:"orphans,omitempty"`
}

// unexplained is how many of the row's republishes a stream fault must
// explain: a comment or an update on a ticket ticketrelay filed is
// published once more if it was parked until its create settled
// (decision 0186).
func (r *Row) unexplained() int {
	if r.Kind != "" && r.OnRequest != "" && r.Generation > 0 {
		return r.Generation - 1
	}
	return r.Generation
}

// settled reports whether the request needs nothing more from the
// dispatcher: published, and its delivery delivered, failed or uncertain.
func (r *Row) settled() bool {
	return r.Published && r.Delivery != nil && settledState(r.Delivery.State)
}

func settledState(s string) bool {
	return s == "delivered" || s == "failed" || s == "uncertain"
}

// status is what find_request should report for the row.
func (r *Row) status() string {
	switch {
	case r.Delivery != nil && r.Delivery.State == "attempting":
		return "published"
	case r.Delivery != nil:
		return r.Delivery.State
	case r.Published:
		return "published"
	}
	return "queued"
}

// pending counts the rows not settled.
func (s Snapshot) pending() int {
	n := 0
	for _, r := range s.Rows {
		if !r.settled() {
			n++
		}
	}
	return n
}

// ReadSnapshot reads the database at path read-only.
func ReadSnapshot(ctx context.Context, path string) (Snapshot, error) {
	db, err := sql.Open("sqlite", "file:"+filepath.ToSlash(path)+"?mode=ro&_pragma=busy_timeout(10000)")
	if err != nil {
		return Snapshot{}, fmt.Errorf("torture: open %s: %w", path, err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	conn, err := db.Conn(ctx)
	if err != nil {
		return Snapshot{}, fmt.Errorf("torture: open %s: %w", path, err)
	}
	defer conn.Close()
	// One read transaction: a consistent view while the dispatcher writes.
	tx, err := conn.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return Snapshot{}, fmt.Errorf("torture: read %s: %w", path, err)
	}
	defer tx.Rollback()
	s := Snapshot{Rows: map[string]*Row{}}
	err = each(ctx, tx, `SELECT id, request_id, tool, target, ticket_id, kind, on_request FROM requests`, func(rs *sql.Rows) error {
		r := &Row{}
		if err := rs.Scan(&r.Seq, &r.RequestID, &r.Tool, &r.Target, &r.TicketID, &r.Kind, &r.OnRequest); err != nil {
			return err
		}
		s.Rows[r.RequestID] = r
		return nil
	})
	if err != nil {
		return s, err
	}
	err = each(ctx, tx, `SELECT request_id, ticket_id, title FROM tickets`, func(rs *sql.Rows) error {
		var id, tid, title string
		if err := rs.Scan(&id, &tid, &title); err != nil {
			return err
		}
		r := s.Rows[id]
		if r == nil {
			s.Orphans = append(s.Orphans, "ticket "+tid+" of request "+id)
			return nil
		}
		r.HasTicket, r.Title = true, title
		if tid != r.TicketID {
			s.Orphans = append(s.Orphans, fmt.Sprintf("ticket %s of request %s, whose ledger row names ticket %s", tid, id, r.TicketID))
		}
		return nil
	})
	if err != nil {
		return s, err
	}
	err = each(ctx, tx, `SELECT request_id, subject, published_at IS NOT NULL, generation, coalesce(stream_seq, 0) FROM outbox`, func(rs *sql.Rows) error {
		var id, subject string
		var pub bool
		var gen int
		var seq int64
		if err := rs.Scan(&id, &subject, &pub, &gen, &seq); err != nil {
			return err
		}
		r := s.Rows[id]
		if r == nil {
			s.Orphans = append(s.Orphans, "outbox row of request "+id)
			return nil
		}
		r.HasOutbox, r.Subject, r.Published, r.Generation, r.StreamSeq = true, subject, pub, gen, uint64(seq)
		return nil
	})
	if err != nil {
		return s, err
	}
	// A delivery record is keyed by its ledger row's id.
	err = each(ctx, tx, `SELECT d.id, r.request_id, d.target, d.state, d.attempts, d.external_id, d.last_error
		FROM deliveries d LEFT JOIN requests r ON r.id = d.id`, func(rs *sql.Rows) error {
		var rowID int64
		var id sql.NullString
		d := &DeliveryRow{}
		if err := rs.Scan(&rowID, &id, &d.Target, &d.State, &d.Attempts, &d.ExternalID, &d.LastError); err != nil {
			return err
		}
		r := s.Rows[id.String]
		if r == nil {
			s.Orphans = append(s.Orphans, fmt.Sprintf("delivery record of ledger row %d", rowID))
			return nil
		}
		r.Delivery = d
		return nil
	})
	return s, err
}

func each(ctx context.Context, tx *sql.Tx, query string, fn func(*sql.Rows) error) error {
	rs, err := tx.QueryContext(ctx, query)
	if err != nil {
		return fmt.Errorf("torture: %s: %w", query, err)
	}
	defer rs.Close()
	for rs.Next() {
		if err := fn(rs); err != nil {
			return fmt.Errorf("torture: %s: %w", query, err)
		}
	}
	if err := rs.Err(); err != nil {
		return fmt.Errorf("torture: %s: %w", query, err)
	}
	return nil
}
