package forwarder

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"ticketrelay/delivery/downstream"
	"ticketrelay/internal/backoff"
	"ticketrelay/request"
)

// aheadPerWorker is how many messages a target's consumer holds per worker
// beyond the one each worker is handling: a worker that finishes takes the
// next message at once instead of waiting for a pull's round trip.
const aheadPerWorker = 2

// fetchHeartbeat is the idle heartbeat of a pull: a pull the server no
// longer holds (a reconnect to a restarted server) is given up after two.
const fetchHeartbeat = 2 * time.Second

// inbox holds the messages a target's consumer has pulled and its workers
// have not finished: at most capacity (workers + aheadPerWorker×workers),
// because each pull asks for no more messages than there are free slots
// (Fetch), and a slot is freed only when a worker is done with its
// message. Every message in the inbox keeps its ack deadline: JetStream
// starts a message's AckWait when it sends it, and a message waiting
// behind slow or rate-limited calls would otherwise be redelivered while
// its first copy is still queued here (see keepAlive). A worker's attempt
// keeps its message alive from the moment the worker takes it.
type inbox struct {
	// msgs holds the pulled messages, in the groups they arrived in
	// (fill). Capacity: a push never blocks.
	msgs chan []*item
	// ready holds messages whose records a worker read ahead with its own
	// (see readAhead); workers take them first. Capacity: never blocks.
	ready chan *item
	// refill is the fewest free slots worth a pull (the pull of all free
	// slots is outstanding until it is filled or expires).
	refill int

	mu     sync.Mutex
	free   int
	queued map[jetstream.Msg]time.Time // waiting for a worker: since when, or since its last InProgress
	freed  chan struct{}               // a slot was freed (capacity 1)
}

func newInbox(workers int) *inbox {
	capacity := workers * (1 + aheadPerWorker)
	return &inbox{
		msgs:   make(chan []*item, capacity),
		ready:  make(chan *item, capacity),
		refill: workers,
		free:   capacity,
		queued: make(map[jetstream.Msg]time.Time, capacity),
		freed:  make(chan struct{}, 1),
	}
}

// reserve waits for at least refill free slots and takes every free slot:
// the size of the next pull. It reports false when ctx ends first.
func (in *inbox) reserve(ctx context.Context) (int, bool) {
	for {
		in.mu.Lock()
		if n := in.free; n >= in.refill {
			in.free = 0
			in.mu.Unlock()
			return n, true
		}
		in.mu.Unlock()
		select {
		case <-in.freed:
		case <-ctx.Done():
			return 0, false
		}
	}
}

// release frees n slots.
func (in *inbox) release(n int) {
	if n <= 0 {
		return
	}
	in.mu.Lock()
	in.free += n
	in.mu.Unlock()
	select {
	case in.freed <- struct{}{}:
	default:
	}
}

// push queues messages pulled into reserved slots.
func (in *inbox) push(group []*item, now time.Time) {
	in.mu.Lock()
	for _, it := range group {
		in.queued[it.msg] = now
	}
	in.mu.Unlock()
	in.msgs <- group
}

// take hands a worker the next message; false once the inbox is closed and
// empty. A message whose record was read ahead goes first. Otherwise the
// worker takes the next group of pulled messages and every one waiting
// behind it, has their records read (a query per MaxPriorBatch), keeps the
// first and leaves the others ready. From then on the worker keeps its
// message alive, and frees its slot (release(1)) when done with it.
func (in *inbox) take(read func([]*item)) (*item, bool) {
	select {
	case it := <-in.ready:
		return in.taken(it), true
	default:
	}
	select {
	case it := <-in.ready:
		return in.taken(it), true
	case group, ok := <-in.msgs:
		if !ok {
			// Closed: what is left was read ahead. The worker that left it
			// takes it, if no one else does, before it stops itself.
			select {
			case it := <-in.ready:
				return in.taken(it), true
			default:
				return nil, false
			}
		}
	more:
		for len(group) < request.MaxPriorBatch {
			select {
			case next, ok := <-in.msgs:
				if !ok {
					break more
				}
				group = append(group, next...)
			default:
				break more
			}
		}
		// Read in queries of MaxPriorBatch, each one's messages ready for
		// the other workers as soon as it is answered.
		for from := 0; from < len(group); from += request.MaxPriorBatch {
			chunk := group[from:min(from+request.MaxPriorBatch, len(group))]
			read(chunk)
			if from == 0 {
				chunk = chunk[1:] // the worker's own
			}
			for _, next := range chunk {
				in.ready <- next
			}
		}
		return in.taken(group[0]), true
	}
}

// taken ends the inbox's keeping of it alive: its worker's attempt does
// from now on.
func (in *inbox) taken(it *item) *item {
	in.mu.Lock()
	delete(in.queued, it.msg)
	in.mu.Unlock()
	return it
}

// keepAlive tells JetStream, every period, that the messages waiting in
// the inbox for longer than period are still wanted, until done is closed.
// It holds the lock while it does, so a message a worker has taken (and
// may ack) is never touched.
func (in *inbox) keepAlive(period time.Duration, done <-chan struct{}, warn func(error)) {
	tick := time.NewTicker(period)
	defer tick.Stop()
	for {
		select {
		case <-done:
			return
		case now := <-tick.C:
			in.mu.Lock()
			for msg, since := range in.queued {
				if now.Sub(since) < period {
					continue
				}
				in.queued[msg] = now
				if err := msg.InProgress(); err != nil {
					warn(err)
				}
			}
			in.mu.Unlock()
		}
	}
}

// fill pulls t's messages into in until ctx ends or the consumer is gone,
// then closes the inbox. Each pull asks for the free slots and is
// outstanding until they are filled or it expires, so a message published
// while it waits is handed over at once.
func (f *Forwarder) fill(ctx context.Context, t downstream.Target, cons jetstream.Consumer, in *inbox) {
	defer close(in.msgs)
	pace := backoff.Policy{Base: 100 * time.Millisecond, Max: 5 * time.Second}
	failures := 0
	for {
		n, ok := in.reserve(ctx)
		if !ok {
			return
		}
		got := 0
		var last jetstream.Msg
		batch, err := cons.Fetch(n, jetstream.FetchContext(ctx), jetstream.FetchHeartbeat(fetchHeartbeat))
		if err == nil {
			msgs := batch.Messages()
			for msg := range msgs {
				// The messages of the pull that have arrived by now go
				// together: the worker that takes them reads their records
				// in one query. Handed over one by one, each would go to a
				// waiting worker, to be read alone.
				group := []*item{f.newItem(msg)}
				last = msg
			more:
				for len(group) < request.MaxPriorBatch {
					select {
					case next, ok := <-msgs:
						if !ok {
							break more
						}
						group = append(group, f.newItem(next))
						last = next
					default:
						break more
					}
				}
				got += len(group)
				in.push(group, time.Now())
			}
			err = batch.Error()
		}
		if last != nil {
			if md, err := last.Metadata(); err == nil {
				f.backlog.pulled(md.NumPending, time.Now())
			}
		}
		in.release(n - got)
		switch {
		case ctx.Err() != nil:
			return
		case errors.Is(err, jetstream.ErrConsumerDeleted), errors.Is(err, jetstream.ErrConsumerNotFound):
			f.log.Error("forwarder: the target's consumer was deleted", "target", t.Name())
			return
		case err == nil || got > 0:
			failures = 0
			continue
		}
		// Disconnected, a pull the server no longer held (missed
		// heartbeats), JetStream unavailable: pull again, backing off.
		failures++
		if failures > 1 || !errors.Is(err, jetstream.ErrNoHeartbeat) {
			f.log.Warn("forwarder: pulling messages", "target", t.Name(), "err", err, "failures", failures)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(pace.Delay(failures)):
		}
	}
}
