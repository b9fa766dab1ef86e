package e2e

import (
	"database/sql"
	"fmt"
	"testing"
	"time"

	"ticketrelay/testkit/e2eproc"
)

// A dispatcher restarted on the data directory of one that was killed with
// SIGKILL relays at once: the relay lease its predecessor still holds (for
// up to -lease-ttl) belongs to a process known dead, since its data-directory
// lock was free.
func TestRelayTakesOverAtOnceAfterKill9(t *testing.T) {
	const leaseTTL = 15 * time.Second // the default: what a successor used to wait out
	s := newStack(t)
	s.dispArgs = []string{"-lease-ttl", leaseTTL.String()}
	d1 := s.startDispatcher(t)
	s.startFront(t, "127.0.0.1:0")
	cs := e2eproc.Connect(t, s.url)
	mustCreate(t, cs, ticketArgs("takeover-before", "before the crash"))
	waitDelivered(t, cs, 20*time.Second, "takeover-before")
	if got := scrape(t, d1).Get("ticketrelay_relay_lease_held"); got != 1 {
		t.Fatalf("the first dispatcher does not hold the relay lease (%v)", got)
	}

	d1.Kill9()
	<-d1.Done()
	if !d1.KilledBySIGKILL() {
		t.Fatalf("dispatcher not killed by SIGKILL: %v", d1.Err())
	}
	db := openDB(t, s.db)
	var expires int64
	if err := db.QueryRow(`SELECT expires_at FROM leases WHERE name = 'relay'`).Scan(&expires); err != nil {
		t.Fatalf("the dead dispatcher's lease: %v", err)
	}
	if left := time.Until(time.Unix(0, expires)); left < 3*time.Second {
		t.Fatalf("the dead dispatcher's lease has only %s left: nothing to show", left)
	}
	mustCreate(t, cs, ticketArgs("takeover-after", "accepted while no dispatcher runs"))

	began := time.Now()
	d2 := s.startDispatcher(t)
	published := func() bool {
		var at sql.NullInt64
		if err := db.QueryRow(`SELECT published_at FROM outbox WHERE request_id = 'takeover-after'`).Scan(&at); err != nil {
			t.Fatal(err)
		}
		return at.Valid
	}
	waitFor(t, leaseTTL+10*time.Second, "the successor to publish", published)
	took := time.Since(began)
	left := time.Until(time.Unix(0, expires)) + took // what was left of the dead lease at the restart
	t.Logf("first publish %s after the successor was launched (the dead holder's lease had %s left)",
		took.Round(time.Millisecond), left.Round(time.Millisecond))
	if took > 3*time.Second {
		t.Errorf("the successor published %s after its launch: it waited out the dead holder's lease", took)
	}
	waitDelivered(t, cs, 20*time.Second, "takeover-after")
	if got := scrape(t, d2).Get("ticketrelay_relay_lease_held"); got != 1 {
		t.Errorf("the successor does not hold the relay lease (%v)", got)
	}
	// The killed dispatcher left its wake-up socket behind; the successor
	// replaced it, and mcp-front's commits wake the successor now.
	woken := 0
	waitFor(t, 10*time.Second, "a commit of mcp-front's to wake the successor's relay", func() bool {
		woken++
		mustCreate(t, cs, ticketArgs(fmt.Sprintf("takeover-woken-%d", woken), "wakes the successor"))
		return scrape(t, d2).Get("ticketrelay_relay_wakeups_total") > 0
	})
}
