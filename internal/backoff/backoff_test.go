package backoff_test

import (
	"testing"
	"time"

	"ticketrelay/internal/backoff"
)

func TestCeilingDoublesAndCaps(t *testing.T) {
	p := backoff.Policy{Base: 100 * time.Millisecond, Max: time.Second}
	for attempt, want := range map[int]time.Duration{
		0:       100 * time.Millisecond, // treated as the first
		1:       100 * time.Millisecond,
		2:       200 * time.Millisecond,
		3:       400 * time.Millisecond,
		4:       800 * time.Millisecond,
		5:       time.Second,
		6:       time.Second,
		64:      time.Second,
		1 << 30: time.Second, // no overflow, and no loop of a billion steps
	} {
		if got := p.Ceiling(attempt); got != want {
			t.Errorf("Ceiling(%d) = %v, want %v", attempt, got, want)
		}
	}
	if got := (backoff.Policy{Base: 3 * time.Second, Max: time.Second}).Ceiling(1); got != time.Second {
		t.Errorf("Base above Max: Ceiling(1) = %v, want the cap", got)
	}
	if got := (backoff.Policy{Base: time.Nanosecond, Max: 24 * time.Hour}).Ceiling(100); got != 24*time.Hour {
		t.Errorf("Ceiling(100) = %v, want 24h", got)
	}
}

func TestDelayIsEqualJitter(t *testing.T) {
	p := backoff.Policy{Base: 50 * time.Millisecond, Max: 5 * time.Second}
	for attempt := 1; attempt <= 9; attempt++ {
		c := p.Ceiling(attempt)
		lo, hi := c, time.Duration(0)
		for range 2000 {
			d := p.Delay(attempt)
			if d < c/2 || d > c {
				t.Fatalf("Delay(%d) = %v, outside [%v, %v]", attempt, d, c/2, c)
			}
			lo, hi = min(lo, d), max(hi, d)
		}
		// Spread over the range, not stuck at one end.
		if lo > c/2+c/16 || hi < c-c/16 {
			t.Errorf("Delay(%d) ranged over [%v, %v] in 2000 draws, want close to [%v, %v]", attempt, lo, hi, c/2, c)
		}
	}
	if d := (backoff.Policy{}).Delay(3); d != 0 {
		t.Errorf("zero policy Delay = %v", d)
	}
	if d := (backoff.Policy{Base: 1, Max: 1}).Delay(1); d != 1 {
		t.Errorf("1ns policy Delay = %v", d)
	}
}
