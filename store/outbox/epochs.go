package outbox

import "sync"

// epochs counts the batches in flight by the epoch they began in, so that a
// caller can wait for those that began before a given moment while later
// ones keep starting (Relay.InFlightDone).
type epochs struct {
	mu  sync.Mutex
	cur *epoch // nil: no batch began since the last end
}

type epoch struct {
	n     int
	ended bool
	done  chan struct{} // closed once ended and n is 0
}

// enter counts a batch into the current epoch; pass the result to leave.
func (e *epochs) enter() *epoch {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.cur == nil {
		e.cur = &epoch{done: make(chan struct{})}
	}
	e.cur.n++
	return e.cur
}

// leave counts a batch out of the epoch it entered.
func (e *epochs) leave(ep *epoch) {
	e.mu.Lock()
	defer e.mu.Unlock()
	ep.n--
	if ep.n == 0 && ep.ended {
		close(ep.done)
	}
}

// end closes the current epoch: batches that enter from now on count in a
// new one. The channel is closed once every batch of the ended epoch left.
func (e *epochs) end() <-chan struct{} {
	e.mu.Lock()
	defer e.mu.Unlock()
	ep := e.cur
	e.cur = nil
	if ep == nil {
		ep = &epoch{done: make(chan struct{})}
	}
	ep.ended = true
	if ep.n == 0 {
		close(ep.done)
	}
	return ep.done
}
