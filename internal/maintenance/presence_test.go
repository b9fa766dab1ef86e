package maintenance_test

import (
	"context"
	"testing"
	"time"

	"ticketrelay/internal/archetype"
	"ticketrelay/internal/maintenance"
)

// Run renews the entry and withdraws it when its context ends.
func TestPresenceRunWithdrawsOnStop(t *testing.T) {
	e := openEnv(t)
	entry := e.l.NewPresence("d1", []string{"local"}, "")
	if err := entry.Announce(context.Background()); err != nil {
		t.Fatal(err)
	}
	p := maintenance.NewPresence(archetype.Archetype{Logger: discard()}, entry)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
	s, err := e.l.Served(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if s.Dispatchers != 0 {
		t.Fatalf("Served = %+v after Run ended", s)
	}
}
