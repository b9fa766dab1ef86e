package forwarder

import (
	"errors"
	"time"

	"ticketrelay/request"
)

// pace waits until the target takes another call: a place under its
// concurrency limit, past any pause a 429's Retry-After asked for (see
// adaptive), and then a turn under its rate limit (Config.RateLimits).
// The message keeps its ack deadline meanwhile (keepAlive). If the
// forwarder stops first, the message is handed back and pace reports
// false: nothing was called or written.
func (a *attempt) pace() bool {
	if lim := a.f.concurrency[a.t.Name()]; lim != nil {
		began := time.Now()
		c, ok := lim.acquire(a.stop)
		if !ok {
			_ = a.msg.Nak()
			return false
		}
		if waited := time.Since(began); waited > time.Millisecond {
			a.f.metrics.ConcurrencyWaited.WithLabelValues(a.t.Name()).Add(waited.Seconds())
		}
		a.call = c
	}
	lim := a.f.limiters[a.t.Name()]
	if lim == nil {
		return true
	}
	r := lim.Reserve()
	wait := r.Delay()
	if a.f.paced != nil {
		a.f.paced(a.requestID, time.Now().Add(max(wait, 0)))
	}
	if wait <= 0 {
		return true
	}
	a.f.metrics.RateLimitWaits.WithLabelValues(a.t.Name()).Inc()
	began := time.Now()
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case <-timer.C:
		a.f.metrics.RateLimitWaited.WithLabelValues(a.t.Name()).Add(time.Since(began).Seconds())
		return true
	case <-a.stop.Done():
		r.Cancel() // the call is not made: its turn goes to the next one
		a.f.metrics.RateLimitWaited.WithLabelValues(a.t.Name()).Add(time.Since(began).Seconds())
		a.freeCall()
		_ = a.msg.Nak()
		return false
	}
}

// answered frees the call's place under the concurrency limit, telling
// the limit how the downstream answered.
func (a *attempt) answered(err error) {
	if a.call != nil {
		a.call.done(err)
		a.call = nil
	}
}

// freeCall frees a place pace took for a call that was not made (a claim
// refused, the forwarder stopping).
func (a *attempt) freeCall() {
	if a.call != nil {
		a.call.release()
		a.call = nil
	}
}

// keepAlive tells JetStream every Config.AckWait/3 that the message is still being
// worked on, so a slow downstream call is not redelivered to another worker
// meanwhile, until stopKeepAlive. A timer rather than a goroutine of its
// own: every attempt starts one, and almost all end long before the first
// tick.
func (a *attempt) keepAlive() {
	a.alive.mu.Lock()
	defer a.alive.mu.Unlock()
	a.alive.t = time.AfterFunc(a.f.cfg.AckWait/3, a.extendAck)
}

func (a *attempt) extendAck() {
	a.alive.mu.Lock()
	defer a.alive.mu.Unlock()
	if a.alive.stopped {
		return
	}
	if err := a.msg.InProgress(); err != nil {
		a.log().Warn("forwarder: extending the ack deadline", "err", err)
	}
	a.alive.t.Reset(a.f.cfg.AckWait / 3)
}

// stopKeepAlive ends keepAlive: no extension is sent after it returns.
func (a *attempt) stopKeepAlive() {
	a.alive.mu.Lock()
	defer a.alive.mu.Unlock()
	a.alive.stopped = true
	a.alive.t.Stop()
}

// ack settles the message once its outcome is durable in the ledger. It does
// not wait for the server's confirmation: the worker moves on to the next
// message (waiting for it was a large part of an attempt, and made the local
// target's workers the pipeline's bottleneck; decision 0075 has the
// measurements). An ack that is lost brings the message back after AckWait,
// and the next attempt finds its record settled and skips it
// (RedeliveredSkipped).
func (a *attempt) ack() error {
	if err := a.msg.Ack(); err != nil {
		a.log().Warn("forwarder: ack not sent; a redelivery will be skipped", "err", err)
	}
	return nil
}

// bookkeepingFailed hands the message back: the ledger could not be read or
// written, or its record changed under this copy, so look again soon.
func (a *attempt) bookkeepingFailed(err error) {
	if errors.Is(err, request.ErrStale) {
		a.log().Info("forwarder: another copy of the message changed the delivery record first; looking again")
	} else {
		a.log().Error("forwarder: delivery bookkeeping failed; message will be redelivered", "err", err)
	}
	_ = a.msg.NakWithDelay(a.f.cfg.Retry.Delay(1))
}
