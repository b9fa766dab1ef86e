package outbox_test

import (
	"path/filepath"
	"testing"
	"time"

	"ticketrelay/testkit/fixture"
	"ticketrelay/testkit/testclock"

	"ticketrelay/store/outbox"
	"ticketrelay/testkit/testwait"
)

// The lease rules on an injected clock: one holder at a time, renewal by the
// holder, takeover only after expiry or release.
func TestLeaseExpiryAndRelease(t *testing.T) {
	b := startBroker(t)
	js := b.connect(t)
	path := filepath.Join(t.TempDir(), "tickets.db")
	c := testclock.New(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	na := newNode(t, "a", path, js, outbox.RelayConfig{}, time.Now)
	nb := newNode(t, "b", path, js, outbox.RelayConfig{}, time.Now)
	a := &outbox.Lease{Name: "test", Holder: "a", TTL: 10 * time.Second, Tx: na.w, Now: c.Now}
	bl := &outbox.Lease{Name: "test", Holder: "b", TTL: 10 * time.Second, Tx: nb.w, Now: c.Now}

	step := func(l *outbox.Lease, want bool, what string) {
		t.Helper()
		got, err := l.Acquire(testCtx(t))
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if got != want {
			t.Fatalf("%s: %s.Acquire = %v, want %v", what, l.Holder, got, want)
		}
	}
	step(a, true, "free lease")
	step(bl, false, "held by a")
	c.Add(6 * time.Second)
	step(a, true, "renewal by a") // now expires at t0+16s
	c.Add(9 * time.Second)        // t0+15s: a's first term is over, the renewal holds
	step(bl, false, "renewed by a")
	c.Add(time.Second + time.Nanosecond) // past t0+16s: a vanished without renewing
	step(bl, true, "expired")
	step(a, false, "taken over by b")
	if err := a.Release(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	step(bl, true, "a's release does not free b's lease")
	step(a, false, "still b's")
	if err := bl.Release(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	step(a, true, "released by b")
	// Other lease names are independent.
	other := &outbox.Lease{Name: "other", Holder: "b", TTL: time.Second, Tx: nb.w, Now: c.Now}
	step(other, true, "another name")
}

// A holder known to be dead (Lease.Dead) loses its lease at once; a live
// holder that is not the dead one keeps it until it expires.
func TestLeaseTakenFromADeadHolder(t *testing.T) {
	b := startBroker(t)
	js := b.connect(t)
	path := filepath.Join(t.TempDir(), "tickets.db")
	c := testclock.New(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	n := newNode(t, "n", path, js, outbox.RelayConfig{}, time.Now)
	acquire := func(l *outbox.Lease) bool {
		t.Helper()
		ok, err := l.Acquire(testCtx(t))
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	old := &outbox.Lease{Name: "relay", Holder: "host/1/aaaa", TTL: 15 * time.Second, Tx: n.w, Now: c.Now}
	if !acquire(old) {
		t.Fatal("free lease not taken")
	}
	other := &outbox.Lease{Name: "relay", Holder: "host/2/bbbb", TTL: 15 * time.Second, Tx: n.w, Now: c.Now, Dead: "host/9/dead"}
	if acquire(other) {
		t.Fatal("a lease whose holder is alive was taken")
	}
	succ := &outbox.Lease{Name: "relay", Holder: "host/3/cccc", TTL: 15 * time.Second, Tx: n.w, Now: c.Now, Dead: "host/1/aaaa"}
	if !acquire(succ) {
		t.Fatal("the dead holder's lease was not taken at once")
	}
	if acquire(old) {
		t.Fatal("the old holder still holds the lease after the takeover")
	}
	if acquire(other) {
		t.Fatal("a third holder took the successor's lease")
	}
}

// Two dispatchers on one database: only the lease holder publishes; when it
// stops it gives the lease back and the other takes over.
func TestOnlyOneRelayPublishes(t *testing.T) {
	b := startBroker(t)
	js := b.connect(t)
	path := filepath.Join(t.TempDir(), "tickets.db")
	const ttl = 3 * time.Second // a standby retries every ttl/3
	cfg := outbox.RelayConfig{LeaseTTL: ttl}
	a := newNode(t, "relay-a", path, js, cfg, time.Now)
	bn := newNode(t, "relay-b", path, js, cfg, time.Now)
	db := fixture.Raw(t, path)

	a.run(t)
	waitFor(t, 10*time.Second, "relay-a to hold the lease", func() bool { return value(t, a.m.LeaseHeld) == 1 })
	bn.run(t)
	// Rows written through b's handle are published by a alone. Sample the
	// gauges while that happens and for longer than one standby retry.
	bn.create(t, ids("first", 20)...)
	onlyAHolds := func() bool { return value(t, a.m.LeaseHeld) == 1 && value(t, bn.m.LeaseHeld) == 0 }
	testwait.Holds(t, ttl/3+200*time.Millisecond, "a holding the lease alone", onlyAHolds)
	// The counter moves just after the mark commits: wait on it, then check
	// that the outbox agrees.
	waitFor(t, 10*time.Second, "relay-a to dispatch the 20 rows", func() bool { return value(t, a.m.Dispatched) >= 20 })
	if n := backlog(t, db); n != 0 {
		t.Fatalf("backlog %d after 20 dispatched, want 0", n)
	}
	if !onlyAHolds() {
		t.Fatalf("lease gauges a=%v b=%v, want a=1 b=0", value(t, a.m.LeaseHeld), value(t, bn.m.LeaseHeld))
	}
	if da, dbn := value(t, a.m.Dispatched), value(t, bn.m.Dispatched); da != 20 || dbn != 0 {
		t.Fatalf("dispatched a=%v b=%v, want 20 and 0", da, dbn)
	}

	a.stop(t)
	stopped := time.Now()
	var holders int
	if err := db.QueryRow(`SELECT count(*) FROM leases WHERE holder = 'relay-a'`).Scan(&holders); err != nil || holders != 0 {
		t.Fatalf("relay-a still holds the lease after Run returned (%d rows, %v)", holders, err)
	}
	// Released, not expired: b takes over at its next retry, well before a's
	// lease (renewed at most ttl/3 ago) could have expired.
	waitFor(t, ttl/3+time.Second, "relay-b to take the released lease", func() bool { return value(t, bn.m.LeaseHeld) == 1 })
	t.Logf("relay-b took over %v after relay-a stopped", time.Since(stopped))
	a.create(t, ids("second", 10)...)
	waitFor(t, 10*time.Second, "relay-b to dispatch the 10 rows", func() bool { return value(t, bn.m.Dispatched) >= 10 })
	if n := backlog(t, db); n != 0 {
		t.Fatalf("backlog %d after relay-b dispatched 10, want 0", n)
	}
	if da, dbn := value(t, a.m.Dispatched), value(t, bn.m.Dispatched); da != 20 || dbn != 10 {
		t.Fatalf("dispatched a=%v b=%v, want 20 and 10", da, dbn)
	}
	if n := countMsgs(streamMessages(t, js)); n != 30 {
		t.Fatalf("stream holds %d messages, want 30", n)
	}
}

// A holder that vanishes without releasing (kill -9) blocks the others
// until its lease expires on the clock, then the standby takes over.
func TestRelayTakesOverExpiredLease(t *testing.T) {
	b := startBroker(t)
	js := b.connect(t)
	path := filepath.Join(t.TempDir(), "tickets.db")
	c := testclock.New(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	const ttl = time.Second
	n := newNode(t, "relay-b", path, js, outbox.RelayConfig{LeaseTTL: ttl}, c.Now)
	db := fixture.Raw(t, path)

	ghost := &outbox.Lease{Name: "relay", Holder: "relay-crashed", TTL: ttl, Tx: n.w, Now: c.Now}
	if ok, err := ghost.Acquire(testCtx(t)); err != nil || !ok {
		t.Fatalf("ghost Acquire = %v, %v", ok, err)
	}
	n.create(t, ids("req", 5)...)
	n.run(t)
	// Two standby retries (every ttl/3 of real time) on a frozen clock: the
	// lease has not expired, so nothing moves.
	testwait.Holds(t, 2*ttl/3+100*time.Millisecond, "the unexpired lease of another holder (relay must not publish)", func() bool {
		return value(t, n.m.LeaseHeld) == 0 && backlog(t, db) == 5
	})
	c.Add(ttl + time.Nanosecond)
	waitFor(t, 5*time.Second, "the relay to take the expired lease and publish", func() bool {
		return value(t, n.m.LeaseHeld) == 1 && backlog(t, db) == 0
	})
	for _, id := range ids("req", 5) {
		at, _, err := publishedAt(t, db, id)
		if err != nil || !at.Equal(c.Now()) {
			t.Errorf("%s published_at %v (%v), want the injected clock %v", id, at, err, c.Now())
		}
	}
	if ok, err := ghost.Acquire(testCtx(t)); err != nil || ok {
		t.Fatalf("the vanished holder got its lease back: %v, %v", ok, err)
	}
}
