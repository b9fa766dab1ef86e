package forwarder

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"ticketrelay/request"
	"ticketrelay/ticket"
)

// Reading ahead (decision 0060). A worker that takes a message from the
// pull reads the ledger for every message waiting behind it too, in one
// query (ledger.PriorDeliveries), and leaves them ready for the next
// workers: a pull's worth of tickets costs one read transaction instead of
// one each. A record read ahead is used only if it still says what a read
// of its own would: no other copy of the request was in this process's
// hands when it was read, or arrived since (copies), and it is younger
// than priorFresh. Any doubt, and the attempt reads again, as before.

// priorFresh is how long a record read ahead stands for a fresh read. A
// write from elsewhere (another dispatcher, an operator) in that time is
// seen by the attempt's conditional write, as one during the call is.
const priorFresh = time.Second

// BatchDeliveries is a store that reads many delivery records in one query
// (the ledger). A store without it (the cluster record) is read request by
// request.
type BatchDeliveries interface {
	PriorDeliveries(ctx context.Context, ids []string) ([]request.Prior, []error, error)
}

// item is a message in a target's inbox.
type item struct {
	msg jetstream.Msg
	ref ticket.Ref
	bad error  // the message does not decode: ref is empty
	gen uint64 // this copy's number among the request's copies (copies.enter)

	prior  *request.Prior // read ahead; nil: the attempt reads it
	readAt time.Time
}

// copies counts, per request, the messages this process holds for it:
// pulled and not yet done with (a delivery's outcome committed or the
// message handed back). JetStream redelivers a message whose deadline
// passed, so two copies can be in hand at once.
type copies struct {
	mu  sync.Mutex
	gen uint64
	m   map[string]*copyCount
}

type copyCount struct {
	n   int
	gen uint64 // of the latest copy to arrive
}

// enter counts a copy of requestID in and returns its number.
func (c *copies) enter(requestID string) uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	if c.m == nil {
		c.m = make(map[string]*copyCount)
	}
	cc := c.m[requestID]
	if cc == nil {
		cc = &copyCount{}
		c.m[requestID] = cc
	}
	cc.n++
	cc.gen = c.gen
	return c.gen
}

// alone reports whether copy gen is the only copy of requestID in hand,
// and the latest to arrive.
func (c *copies) alone(requestID string, gen uint64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	cc := c.m[requestID]
	return cc != nil && cc.n == 1 && cc.gen == gen
}

// leave counts a copy of requestID out: its outcome is committed, or it
// was handed back.
func (c *copies) leave(requestID string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cc := c.m[requestID]; cc != nil {
		if cc.n--; cc.n <= 0 {
			delete(c.m, requestID)
		}
	}
}

var errNoRequestID = errors.New("no request id")

// newItem decodes a pulled message and counts it in.
func (f *Forwarder) newItem(msg jetstream.Msg) *item {
	it := &item{msg: msg}
	if err := json.Unmarshal(msg.Data(), &it.ref); err != nil || it.ref.RequestID == "" {
		it.bad = cmp.Or(err, errNoRequestID)
		return it
	}
	it.gen = f.copies.enter(it.ref.RequestID)
	return it
}

// done counts it out, unless it never counted.
func (f *Forwarder) done(it *item) {
	if it.bad == nil {
		f.copies.leave(it.ref.RequestID)
	}
}

// readAhead reads the records of group's messages in one query, for those
// that are alone in hand. A failed read leaves them to their attempts,
// which read (and report) for themselves.
func (f *Forwarder) readAhead(group []*item) {
	br, ok := f.ledger.(BatchDeliveries)
	if !ok || len(group) < 2 {
		return
	}
	ids := make([]string, 0, len(group))
	want := make([]*item, 0, len(group))
	for _, it := range group {
		if it.bad == nil && f.copies.alone(it.ref.RequestID, it.gen) {
			ids, want = append(ids, it.ref.RequestID), append(want, it)
		}
	}
	if len(ids) < 2 {
		return
	}
	at := time.Now()
	ps, errs, err := br.PriorDeliveries(context.Background(), ids)
	if err != nil {
		return
	}
	for i, it := range want {
		if errs[i] == nil {
			it.prior, it.readAt = &ps[i], at
		}
	}
}

// readAheadFor is it's record read ahead, if it still stands for a read of
// its own: the caller handles the request (Forwarder.busy).
func (f *Forwarder) readAheadFor(it *item) *request.Prior {
	if it.prior == nil || time.Since(it.readAt) >= priorFresh || !f.copies.alone(it.ref.RequestID, it.gen) {
		return nil
	}
	return it.prior
}
