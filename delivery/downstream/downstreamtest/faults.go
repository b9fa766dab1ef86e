// Package downstreamtest holds what every adapter's tests share: fault
// injection for the httptest fakes of the third-party APIs, and the
// conformance suite (Run) that every downstream.Target must pass.
package downstreamtest

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"time"
)

// Fault is what a fake does to one create request.
type Fault int

const (
	// None: the fake answers as the API would.
	None Fault = iota
	// LoseResponse: the fake processes the request (the item exists), then
	// closes the connection without answering.
	LoseResponse
	// ResetBeforeProcessing: the fake closes the connection without
	// processing the request or answering it.
	ResetBeforeProcessing
	// ServerError: 500 without processing.
	ServerError
	// RateLimited: 429 with Retry-After (Faults.RetryAfter) without processing.
	RateLimited
	// Slow: the fake processes the request, then holds the answer until the
	// client goes away (or SlowLimit passes, then answers).
	Slow
)

func (f Fault) String() string {
	switch f {
	case LoseResponse:
		return "lose-response"
	case ResetBeforeProcessing:
		return "reset-before-processing"
	case ServerError:
		return "500"
	case RateLimited:
		return "429"
	case Slow:
		return "slow"
	}
	return "none"
}

// SlowLimit bounds how long a Slow fault holds an answer, so that a fake
// never outlives its test.
const SlowLimit = 10 * time.Second

// Faults queues the faults of the next create requests of one fake. The
// zero value injects nothing; it is safe for concurrent use.
type Faults struct {
	mu         sync.Mutex
	queue      []Fault
	retryAfter time.Duration
	served     int
}

// Next queues faults for the next create requests, one each, in order.
func (f *Faults) Next(faults ...Fault) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.queue = append(f.queue, faults...)
}

// SetRetryAfter sets the Retry-After of RateLimited answers (default 1s).
func (f *Faults) SetRetryAfter(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.retryAfter = d
}

// Served is the number of create requests that reached Serve.
func (f *Faults) Served() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.served
}

func (f *Faults) take() (Fault, time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.served++
	ra := f.retryAfter
	if ra <= 0 {
		ra = time.Second
	}
	if len(f.queue) == 0 {
		return None, ra
	}
	x := f.queue[0]
	f.queue = f.queue[1:]
	return x, ra
}

// Serve runs the fake's create handler h under the next queued fault. The
// handler has already checked nothing but routing: auth and validation are
// part of processing and happen inside h.
func (f *Faults) Serve(w http.ResponseWriter, r *http.Request, h http.HandlerFunc) {
	fault, retryAfter := f.take()
	switch fault {
	case ResetBeforeProcessing:
		hangUp(w)
		return
	case ServerError:
		http.Error(w, `{"error":"internal server error (injected)"}`, http.StatusInternalServerError)
		return
	case RateLimited:
		w.Header().Set("Retry-After", strconv.Itoa(int(retryAfter/time.Second)))
		http.Error(w, `{"error":"too many requests (injected)"}`, http.StatusTooManyRequests)
		return
	case None:
		h(w, r)
		return
	}
	// LoseResponse and Slow: process now, decide about the answer after.
	rec := httptest.NewRecorder()
	h(rec, r)
	if fault == LoseResponse {
		hangUp(w)
		return
	}
	select {
	case <-r.Context().Done():
		return // the client gave up; nothing to answer
	case <-time.After(SlowLimit):
	}
	for k, v := range rec.Header() {
		w.Header()[k] = v
	}
	w.WriteHeader(rec.Code)
	w.Write(rec.Body.Bytes())
}

// hangUp closes the connection without a word.
func hangUp(w http.ResponseWriter) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		panic("downstreamtest: the fake's ResponseWriter cannot be hijacked (HTTP/2?)")
	}
	conn, _, err := hj.Hijack()
	if err != nil {
		panic("downstreamtest: hijack: " + err.Error())
	}
	conn.Close()
}
