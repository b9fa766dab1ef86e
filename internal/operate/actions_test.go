package operate_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"ticketrelay/internal/operate"
	"ticketrelay/request"
	"ticketrelay/store/ledger"
	"ticketrelay/testkit/fixture"
	"ticketrelay/ticket"
)

type recorder struct {
	entries []operate.Entry
	fail    error
}

func (r *recorder) Record(_ context.Context, e operate.Entry) error {
	r.entries = append(r.entries, e)
	return r.fail
}

func newLedger(t *testing.T) *ledger.Ledger {
	t.Helper()
	return fixture.NewLedger(t).Ledger
}

func accept(t *testing.T, l *ledger.Ledger, id, state string) {
	t.Helper()
	ctx := context.Background()
	req := ticket.Request{RequestID: id, Tool: "create_ticket", Target: "jira", Title: "t " + id, Body: "b"}
	if err := req.Normalize(); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Create(ctx, req); err != nil {
		t.Fatal(err)
	}
	if err := l.RecordDelivery(ctx, request.Delivery{RequestID: id, Target: "jira", State: state, Attempts: 1}); err != nil {
		t.Fatal(err)
	}
}

// Every action, taken or refused, is recorded with its actor and outcome;
// one taken and not recorded says so.
func TestActionsRecorded(t *testing.T) {
	ctx := context.Background()
	l := newLedger(t)
	accept(t, l, "a", string(request.StatusFailed))
	accept(t, l, "u", string(request.StatusUncertain))
	rec := &recorder{}
	who := operate.Actor{Subject: "alice", Trail: rec}

	done, err := operate.Redrive(ctx, l, who, []string{"a", "u", "nope"})
	if len(done) != 1 || done[0] != "a" || err == nil || !errors.Is(err, request.ErrNotFound) || !errors.Is(err, request.ErrState) {
		t.Fatalf("redrive = %v, %v; want a redriven, u and nope refused", done, err)
	}
	if len(rec.entries) != 3 || rec.entries[0].Outcome != "ok" || rec.entries[0].Subject != "alice" || !strings.Contains(rec.entries[1].Outcome, "only failed") {
		t.Fatalf("entries %+v", rec.entries)
	}
	if err := operate.Resolve(ctx, l, who, "u", operate.Resolution{ExternalID: "J-1", Redrive: true}); err == nil {
		t.Fatal("a request found delivered was redriven")
	}
	if err := operate.Resolve(ctx, l, who, "u", operate.Resolution{ExternalID: "J-1"}); err != nil {
		t.Fatal(err)
	}
	if last := rec.entries[len(rec.entries)-1]; last.Action != operate.ActionResolve || last.Target != "J-1" || last.Outcome != "ok" {
		t.Errorf("resolve entry %+v", last)
	}
	if _, err := operate.RedriveFailed(ctx, l, who, "jra"); err == nil || !strings.Contains(err.Error(), `no delivery record for target "jra"`) {
		t.Errorf("a mistyped target: %v", err)
	}
	accept(t, l, "b", string(request.StatusFailed))
	rec.fail = errors.New("trail down")
	if _, err := operate.Redrive(ctx, l, who, []string{"b"}); err == nil || !strings.Contains(err.Error(), "was done, but the audit trail did not record it") {
		t.Errorf("unrecorded action: %v", err)
	}
	if st, _ := l.FindScoped(ctx, "b"); st.Status != request.StatusRetrying {
		t.Errorf("b is %s: the action itself must stand", st.Status)
	}
}
