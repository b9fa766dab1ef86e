package forwarder

import (
	"testing"
	"time"

	"ticketrelay/request"
	"ticketrelay/ticket"
)

// A record read ahead stands for a fresh read only while its copy is the
// only one of the request in hand and the latest to arrive, and for no
// longer than priorFresh: another copy could have changed the record
// since, and the attempt must read again.
func TestReadAheadStandsOnlyForTheLoneCopy(t *testing.T) {
	f := &Forwarder{}
	newCopy := func(id string) *item {
		return &item{ref: ticket.Ref{RequestID: id}, gen: f.copies.enter(id)}
	}
	readAt := func(it *item, at time.Time) *item {
		it.prior, it.readAt = &request.Prior{Accepted: true}, at
		return it
	}
	now := time.Now()

	a := readAt(newCopy("req-a"), now)
	if f.readAheadFor(a) == nil {
		t.Fatal("the lone copy's record read ahead was not used")
	}
	stale := readAt(newCopy("req-b"), now.Add(-priorFresh))
	if f.readAheadFor(stale) != nil {
		t.Error("a record read priorFresh ago was used")
	}

	// A second copy arrives after the first was read ahead: neither's
	// record read ahead stands, even once the second is done with.
	first := readAt(newCopy("req-c"), now)
	second := readAt(newCopy("req-c"), now)
	if f.readAheadFor(first) != nil || f.readAheadFor(second) != nil {
		t.Error("a record read ahead was used while two copies were in hand")
	}
	f.done(second)
	if f.readAheadFor(first) != nil {
		t.Error("a record read ahead before another copy arrived (and was done with) was used")
	}
	f.done(first)
	f.done(a)
	f.done(stale)
	if len(f.copies.m) != 0 {
		t.Errorf("copies left counted after all were done with: %v", f.copies.m)
	}

	// Without a read ahead, nothing to use; an undecodable message never
	// counted.
	if f.readAheadFor(newCopy("req-d")) != nil {
		t.Error("a copy with nothing read ahead got a record")
	}
	f.done(&item{bad: errNoRequestID})
}
