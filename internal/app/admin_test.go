package app_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"ticketrelay/internal/app"
	"ticketrelay/internal/app/dispatcher"
	"ticketrelay/request"
	"ticketrelay/store/ledger"
	"ticketrelay/store/sqlitedb"
	"ticketrelay/testkit/fixture"
	"ticketrelay/ticket"
)

// adminDB is a database made by the ledger, with requests in known states.
type adminDB struct {
	path string
	db   *sqlitedb.DB
	w    *sqlitedb.Writer
	l    *ledger.Ledger
}

func newAdminDB(t *testing.T) *adminDB {
	t.Helper()
	l := fixture.NewLedger(t)
	return &adminDB{path: l.Path, db: l.DB, w: l.Writer, l: l.Ledger}
}

// request accepts a request for target, marks its outbox row published (as
// the relay would) and records its delivery in state (empty: none).
func (a *adminDB) request(t *testing.T, id, target, state string, attempts int, lastErr, ext string) request.Result {
	t.Helper()
	ctx := context.Background()
	req := ticket.Request{RequestID: id, Tool: "create_ticket", Target: target, Title: "Ticket " + id, Body: "body", Labels: []string{"admin"}}
	if err := req.Normalize(); err != nil {
		t.Fatal(err)
	}
	res, err := a.l.Create(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	err = a.w.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `UPDATE outbox SET published_at = ? WHERE request_id = ?`, time.Now().UnixNano(), id)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if state != "" {
		d := request.Delivery{RequestID: id, Target: target, State: state, Attempts: attempts, LastError: lastErr, ExternalID: ext}
		if err := a.l.RecordDelivery(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	return res
}

func (a *adminDB) find(t *testing.T, id string) request.Report {
	t.Helper()
	st, err := a.l.Find(context.Background(), "", id)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// outboxRow reads a request's outbox row.
func (a *adminDB) outboxRow(t *testing.T, id string) (publishedAt sql.NullInt64, generation int) {
	t.Helper()
	err := a.db.Reader().QueryRowContext(context.Background(),
		`SELECT published_at, generation FROM outbox WHERE request_id = ?`, id).Scan(&publishedAt, &generation)
	if err != nil {
		t.Fatal(err)
	}
	return publishedAt, generation
}

func (a *adminDB) admin(t *testing.T, args ...string) (string, error) {
	t.Helper()
	args = append(slices.Clone(args), "-db", a.path)
	stdout, _, err := runOnce(t, dispatcher.Run, newEnv(), args...)
	return stdout, err
}

func TestAdminCommands(t *testing.T) {
	a := newAdminDB(t)
	a.request(t, "req-delivered", "support", string(request.StatusDelivered), 1, "", "4711")
	a.request(t, "req-failed-support", "support", string(request.StatusFailed), 3, "permanent error (HTTP 422): Description: cannot be blank", "")
	a.request(t, "req-failed-jira", "ops-jira", string(request.StatusFailed), 1, "auth error (HTTP 401): bad token", "")
	a.request(t, "req-failed-jira-2", "ops-jira", string(request.StatusFailed), 2, "permanent error (HTTP 400): issuetype", "")
	unc := a.request(t, "req-uncertain", "alerts", string(request.StatusUncertain), 1,
		"attempt 1 may have created the item (transient error: EOF) and alerts has no consistent lookup", "")
	a.request(t, "req-uncertain-2", "alerts", string(request.StatusUncertain), 1, "attempt 1 ended without an answer", "")
	a.request(t, "req-retrying", "support", string(request.StatusRetrying), 2, "transient error (HTTP 500)", "")
	// One accepted and not yet published: the backlog.
	ctx := context.Background()
	req := ticket.Request{RequestID: "req-queued", Tool: "create_ticket", Target: "support", Title: "Queued"}
	if err := req.Normalize(); err != nil {
		t.Fatal(err)
	}
	if _, err := a.l.Create(ctx, req); err != nil {
		t.Fatal(err)
	}

	t.Run("status", func(t *testing.T) {
		out, err := a.admin(t, "status")
		if err != nil {
			t.Fatalf("status: %v", err)
		}
		if !regexp.MustCompile(`(?m)^outbox backlog: 1 \(oldest \S+\)$`).MatchString(out) {
			t.Errorf("status does not show a backlog of 1:\n%s", out)
		}
		if !strings.Contains(out, "dispatchers running: 0") || !strings.Contains(out, "no dispatcher is running") {
			t.Errorf("status does not say that no dispatcher runs:\n%s", out)
		}
		rows := map[string]string{
			// TARGET WAITING DELIVERED IN-FLIGHT RETRYING FAILED UNCERTAIN
			"support":  `support\s+1\s+1\s+0\s+1\s+1\s+0`,
			"ops-jira": `ops-jira\s+0\s+0\s+0\s+0\s+2\s+0`,
			"alerts":   `alerts\s+0\s+0\s+0\s+0\s+0\s+2`,
		}
		for target, re := range rows {
			if !regexp.MustCompile(`(?m)^` + re + `\s*$`).MatchString(out) {
				t.Errorf("status: the %s row does not match %s:\n%s", target, re, out)
			}
		}
		for _, want := range []string{"uncertain requests", "req-uncertain ", unc.TicketID, "alerts", "may have created the item",
			"req-uncertain-2", "dispatcher resolve"} {
			if !strings.Contains(out, want) {
				t.Errorf("status does not list %q:\n%s", want, out)
			}
		}
		if strings.Contains(out, "req-failed-support") {
			t.Errorf("status lists a failed request among the uncertain ones:\n%s", out)
		}

		js, err := a.admin(t, "status", "-json")
		if err != nil {
			t.Fatalf("status -json: %v", err)
		}
		var s ledger.Summary
		if err := json.Unmarshal([]byte(js), &s); err != nil {
			t.Fatalf("status -json: %v\n%s", err, js)
		}
		if s.Backlog != 1 || len(s.Uncertain) != 2 || len(s.Targets) != 3 {
			t.Errorf("status -json: backlog %d, %d uncertain, %d targets; want 1, 2, 3:\n%s", s.Backlog, len(s.Uncertain), len(s.Targets), js)
		}
	})

	t.Run("redrive one", func(t *testing.T) {
		if pub, gen := a.outboxRow(t, "req-failed-support"); !pub.Valid || gen != 0 {
			t.Fatalf("before the redrive: published %v, generation %d", pub, gen)
		}
		out, err := a.admin(t, "redrive", "req-failed-support")
		if err != nil {
			t.Fatalf("redrive: %v", err)
		}
		if !strings.Contains(out, "redriven req-failed-support") {
			t.Errorf("redrive output %q", out)
		}
		st := a.find(t, "req-failed-support")
		if st.Status != request.StatusRetrying || st.Attempts != 0 {
			t.Errorf("after the redrive: %s with %d attempts; want retrying with 0", st.Status, st.Attempts)
		}
		if pub, gen := a.outboxRow(t, "req-failed-support"); pub.Valid || gen != 1 {
			t.Errorf("after the redrive the outbox row has published_at %v and generation %d; want NULL and 1", pub, gen)
		}
		// A redrive of a request that is not failed changes nothing.
		for _, id := range []string{"req-delivered", "req-uncertain", "req-retrying"} {
			before := a.find(t, id)
			_, err := a.admin(t, "redrive", id)
			if err == nil || errors.Is(err, app.ErrUsage) || !errors.Is(err, request.ErrState) {
				t.Errorf("redrive of %s (%s): error %v; want a state error", id, before.Status, err)
			}
			if after := a.find(t, id); after.Status != before.Status || after.Attempts != before.Attempts {
				t.Errorf("a refused redrive changed %s: %s/%d → %s/%d", id, before.Status, before.Attempts, after.Status, after.Attempts)
			}
			if pub, gen := a.outboxRow(t, id); !pub.Valid || gen != 0 {
				t.Errorf("a refused redrive touched %s's outbox row: published %v generation %d", id, pub, gen)
			}
		}
		if _, err := a.admin(t, "redrive", "req-never-seen"); !errors.Is(err, request.ErrNotFound) {
			t.Errorf("redrive of an unknown request: %v; want ErrNotFound", err)
		}
	})

	t.Run("redrive -failed -target", func(t *testing.T) {
		a.request(t, "req-failed-other", "bugs", string(request.StatusFailed), 1, "permanent error", "")
		out, err := a.admin(t, "redrive", "-failed", "-target", "ops-jira")
		if err != nil {
			t.Fatalf("redrive -failed -target ops-jira: %v", err)
		}
		if !strings.Contains(out, "2 failed requests redriven") {
			t.Errorf("output %q: want 2 redriven", out)
		}
		for _, id := range []string{"req-failed-jira", "req-failed-jira-2"} {
			if st := a.find(t, id); st.Status != request.StatusRetrying || st.Attempts != 0 {
				t.Errorf("%s: %s/%d after the redrive; want retrying/0", id, st.Status, st.Attempts)
			}
			if pub, gen := a.outboxRow(t, id); pub.Valid || gen != 1 {
				t.Errorf("%s: outbox published %v generation %d; want NULL and 1", id, pub, gen)
			}
		}
		if st := a.find(t, "req-failed-other"); st.Status != request.StatusFailed {
			t.Errorf("another target's failed request was redriven: %s", st.Status)
		}
	})

	t.Run("resolve", func(t *testing.T) {
		out, err := a.admin(t, "resolve", "req-uncertain", "-delivered", "1712345678.000100")
		if err != nil {
			t.Fatalf("resolve: %v", err)
		}
		if !strings.Contains(out, "req-uncertain settled as delivered (1712345678.000100)") {
			t.Errorf("resolve output %q", out)
		}
		if st := a.find(t, "req-uncertain"); st.Status != request.StatusDelivered || st.ExternalID != "1712345678.000100" {
			t.Errorf("after resolve: %s with external id %q", st.Status, st.ExternalID)
		}
		// Flags before the id work as well.
		if _, err := a.admin(t, "resolve", "-failed", "req-uncertain-2"); err != nil {
			t.Fatalf("resolve -failed: %v", err)
		}
		if st := a.find(t, "req-uncertain-2"); st.Status != request.StatusFailed {
			t.Errorf("after resolve -failed: %s", st.Status)
		}
		for _, id := range []string{"req-delivered", "req-retrying", "req-uncertain"} {
			before := a.find(t, id)
			_, err := a.admin(t, "resolve", id, "-delivered", "X-1")
			if err == nil || errors.Is(err, app.ErrUsage) || !errors.Is(err, request.ErrState) {
				t.Errorf("resolve of %s (%s): error %v; want a state error", id, before.Status, err)
			}
			if after := a.find(t, id); after.Status != before.Status || after.ExternalID != before.ExternalID {
				t.Errorf("a refused resolve changed %s: %+v → %+v", id, before, after)
			}
		}
		if _, err := a.admin(t, "resolve", "req-never-seen", "-failed"); !errors.Is(err, request.ErrNotFound) {
			t.Errorf("resolve of an unknown request: %v; want ErrNotFound", err)
		}
	})

	t.Run("usage errors", func(t *testing.T) {
		for _, args := range [][]string{
			{"status", "extra"},
			{"status", "-bogus"},
			{"redrive"},
			{"redrive", "-failed", "req-delivered"},
			{"redrive", "-target", "support", "req-delivered"},
			{"resolve"},
			{"resolve", "req-uncertain"},
			{"resolve", "req-uncertain", "-failed", "-delivered", "X"},
			{"resolve", "a", "b", "-failed"},
		} {
			_, err := a.admin(t, args...)
			if !errors.Is(err, app.ErrUsage) {
				t.Errorf("%v: error %v, want app.ErrUsage", args, err)
			}
		}
		if stdout, _, err := runOnce(t, dispatcher.Run, newEnv(), "status", "-help"); err != nil || !strings.HasPrefix(stdout, "Usage: dispatcher status ") {
			t.Errorf("status -help: %v\n%s", err, stdout)
		}
	})
}
