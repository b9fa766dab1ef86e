package maintenance_test

import (
	"context"
	"testing"
	"time"

	"ticketrelay/internal/maintenance"
)

// A round runs at once on a poke and when what Due returns is closed,
// long before the Interval; Run returns nil when its context ends.
func TestLoopRoundsOnPokeAndDue(t *testing.T) {
	rounds := make(chan int, 10)
	poke := make(chan struct{}, 1)
	due := make(chan struct{})
	dueOnce := due
	n := 0
	l := maintenance.Loop{
		Interval: time.Hour, // never reached in this test
		Poke:     poke,
		Due:      func() <-chan struct{} { return dueOnce },
		RunOnce: func(ctx context.Context) error {
			n++
			dueOnce = nil // what was due is done
			rounds <- n
			return nil
		},
		Log: discard(),
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()

	wait := func(what string, want int) {
		t.Helper()
		select {
		case got := <-rounds:
			if got != want {
				t.Fatalf("%s: round %d, want %d", what, got, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no round", what)
		}
	}
	close(due)
	wait("due", 1)
	poke <- struct{}{}
	wait("poke", 2)
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run = %v at the end of its context, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return once its context ended")
	}
	if len(rounds) != 0 {
		t.Errorf("%d rounds more than asked for", len(rounds))
	}
}
