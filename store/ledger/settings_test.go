package ledger_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"ticketrelay/request"
	"ticketrelay/store/ledger"
)

// The dedupe key namespace may change only while no request will be sent
// again by itself: otherwise its retries would carry another key.
func TestKeyNamespaceChange(t *testing.T) {
	e := openEnv(t, dbPath(t))
	ctx := context.Background()
	if err := e.l.UseKeyNamespace(ctx, "prod"); err != nil {
		t.Fatalf("first start: %v", err)
	}
	if err := e.l.UseKeyNamespace(ctx, "prod"); err != nil {
		t.Fatalf("same namespace: %v", err)
	}
	if _, err := e.l.Create(ctx, newRequest("req-on-its-way")); err != nil {
		t.Fatal(err)
	}
	err := e.l.UseKeyNamespace(ctx, "renamed")
	if !errors.Is(err, ledger.ErrKeyNamespaceChanged) || !strings.Contains(err.Error(), `was "prod" and is now "renamed"`) ||
		!strings.Contains(err.Error(), "1 requests") {
		t.Fatalf("change with a request on its way: %v", err)
	}
	// Refused: the recorded namespace is still the old one.
	if err := e.l.UseKeyNamespace(ctx, "prod"); err != nil {
		t.Fatalf("back to the old namespace: %v", err)
	}
	for _, state := range []string{request.DeliveryAttempting, string(request.StatusRetrying)} {
		if err := e.l.RecordDelivery(ctx, request.Delivery{RequestID: "req-on-its-way", Target: "local", State: state, Attempts: 1, Version: version(t, e, "req-on-its-way")}); err != nil {
			t.Fatal(err)
		}
		if err := e.l.UseKeyNamespace(ctx, "renamed"); !errors.Is(err, ledger.ErrKeyNamespaceChanged) {
			t.Fatalf("change while %s: %v", state, err)
		}
	}
	if err := e.l.RecordDelivery(ctx, request.Delivery{RequestID: "req-on-its-way", Target: "local", State: string(request.StatusDelivered), Attempts: 1}); err != nil {
		t.Fatal(err)
	}
	if err := e.l.UseKeyNamespace(ctx, "renamed"); err != nil {
		t.Fatalf("change once everything is delivered: %v", err)
	}
	if _, err := e.l.Create(ctx, newRequest("req-next")); err != nil {
		t.Fatal(err)
	}
	if err := e.l.UseKeyNamespace(ctx, "renamed"); err != nil {
		t.Fatalf("the new namespace is the recorded one now: %v", err)
	}
}

func version(t *testing.T, e *env, id string) int64 {
	t.Helper()
	d, _, err := e.l.Delivery(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return d.Version
}

// Dispatchers on separate data directories share the ledger and take over
// each other's retries: a second one with another namespace is refused
// while the first runs, and allowed once it has stopped.
func TestKeyNamespaceOfRunningDispatchers(t *testing.T) {
	e := openEnv(t, dbPath(t))
	ctx := context.Background()
	if err := e.l.UseKeyNamespace(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	first := e.l.NewPresence("dispatcher-a", []string{"local"}, "a")
	if err := first.Announce(ctx); err != nil {
		t.Fatal(err)
	}
	err := e.l.UseKeyNamespace(ctx, "b")
	if !errors.Is(err, ledger.ErrKeyNamespaceChanged) || !strings.Contains(err.Error(), `dispatcher dispatcher-a runs with key_namespace "a"`) {
		t.Fatalf("second dispatcher with another namespace: %v", err)
	}
	if err := e.l.UseKeyNamespace(ctx, "a"); err != nil {
		t.Fatalf("second dispatcher with the same namespace: %v", err)
	}
	if err := first.Withdraw(ctx); err != nil {
		t.Fatal(err)
	}
	if err := e.l.UseKeyNamespace(ctx, "b"); err != nil {
		t.Fatalf("once the first stopped (nothing on its way): %v", err)
	}
}
