// Package forwarder consumes accepted tickets from JetStream and delivers
// them to their targets, recording every attempt and outcome in the ledger
// so that find_request can report it.
//
// Exactly-once toward a target with a dedupe key comes from the key: a
// redelivered message is sent again with the same key. Toward a target
// without one, the attempt is recorded before the call; a message that comes
// back with an attempt of unknown outcome is looked up (consistent lookup) or
// declared uncertain, never sent blindly again.
package forwarder

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/time/rate"

	"ticketrelay/delivery/downstream"
	"ticketrelay/installation"
	"ticketrelay/internal/archetype"
	"ticketrelay/internal/backoff"
	"ticketrelay/metrics"
	"ticketrelay/request"
	"ticketrelay/tracing"
)

// Config tunes the forwarder. Zero fields take the documented defaults.
type Config struct {
	// Installation whose stream and subjects the forwarder reads (default:
	// the embedded server's).
	Installation installation.Name
	// Stream is the JetStream stream name. Default: the installation's.
	Stream string
	// KeyNamespace prefixes dedupe keys sent downstream (see downstream.Key).
	KeyNamespace string
	// Workers is the most concurrent deliveries per target; the limit on
	// calls in flight starts lower and climbs toward it while the
	// downstream keeps up (see adaptive). Default: the target's own
	// (downstream.Parallel), else DefaultWorkers.
	Workers int
	// DeliveryTimeout bounds one downstream call. Default 30s.
	DeliveryTimeout time.Duration
	// AckWait is how long JetStream waits for an ack before it redelivers:
	// how soon messages a crashed dispatcher had pulled come back. A delivery
	// in progress extends it every AckWait/3. Default 10s.
	AckWait time.Duration
	// MaxAttempts is how many calls a request gets before it fails, not
	// counting calls the downstream refused for its rate limit. Default 10.
	MaxAttempts int
	// Retry paces transient failures. Default 1s doubling up to 5m.
	Retry backoff.Policy
	// RateLimits paces the calls to the targets they name (Deliver and
	// Find; see downstream.RateLimit). A target not named has no limit.
	RateLimits map[string]downstream.RateLimit
	// Callers is what the tickets of the targets they name say of who
	// asked (downstream.Present); a target not named says nothing.
	Callers map[string]downstream.CallerMode
	// ConsumerCheck is how often each target's consumer is looked up, and
	// created again if it is gone: a consumer deleted while this process
	// was disconnected from the server sends no notice. Default 30s.
	ConsumerCheck time.Duration
	// Retention is how long the store keeps a settled request (the
	// dispatcher's -retention): a message older than it that the store
	// does not hold was settled and pruned. Zero: not known.
	Retention time.Duration
	// Backlog, if set, is told when the forwarder starts draining a
	// backlog (a pull left BacklogPending or more messages behind it in a
	// target's consumer) and when it stops (a second without such a pull,
	// or Run returning). The dispatcher collects garbage less often
	// meanwhile (decision 0064).
	Backlog func(draining bool)
	// Host names this process in each attempt's history (the console's
	// timeline says which host called).
	Host string
	// MaxAckPending bounds each target's messages out and not yet acked
	// (default, and what a dispatcher uses: maxAckPending). Tests lower it
	// to reach the bound.
	MaxAckPending int
}

// WithDefaults fills zero fields.
func (c Config) WithDefaults() Config {
	c.Stream = cmp.Or(c.Stream, c.Installation.Stream())
	c.DeliveryTimeout = cmp.Or(c.DeliveryTimeout, 30*time.Second)
	c.MaxAttempts = cmp.Or(c.MaxAttempts, 10)
	c.AckWait = cmp.Or(c.AckWait, 10*time.Second)
	c.ConsumerCheck = cmp.Or(c.ConsumerCheck, 30*time.Second)
	c.MaxAckPending = cmp.Or(c.MaxAckPending, maxAckPending)
	if c.Retry == (backoff.Policy{}) {
		c.Retry = backoff.Policy{Base: time.Second, Max: 5 * time.Minute}
	}
	return c
}

// Deliveries is the part of a store the forwarder uses: a request's
// ticket and delivery record, read together, and conditional writes of the
// record (see ledger.RecordDelivery). The ledger is one; a multi-host
// installation's cluster record (clusterrec.Deliveries) is the other.
type Deliveries interface {
	PriorDelivery(ctx context.Context, requestID string) (request.Prior, error)
	RecordDelivery(ctx context.Context, d request.Delivery) error
	RecordDeliveryThen(ctx context.Context, d request.Delivery, then func(error)) error
}

// Forwarder delivers the tickets of a set of targets.
type Forwarder struct {
	cfg     Config
	js      jetstream.JetStream
	ledger  Deliveries
	targets map[string]downstream.Target
	// limiters pace the calls to the targets with a rate limit.
	limiters map[string]*rate.Limiter
	// concurrency holds each target's calls in flight under a limit that
	// follows the downstream's answers (see adaptive).
	concurrency map[string]*adaptive
	backlog     *backlogWatch
	// paced, in tests, is told when each call's turn under its target's
	// rate limit comes (see PacedForTest).
	paced   func(requestID string, turn time.Time)
	log     *slog.Logger
	metrics *metrics.Dispatcher
	now     func() time.Time
	// settling counts deliveries whose record is still committing: their
	// messages are acked (or handed back) when it is durable, and Run waits
	// for them.
	settling sync.WaitGroup
	// busy holds the request ids this process is handling, from the first
	// read to the outcome's commit. JetStream redelivers a message whose ack
	// deadline passed while it waited in the client's buffer or while its
	// record committed; that copy waits here for the first (see handle).
	busy sync.Map
	// copies counts the messages in hand per request, so that a record
	// read ahead is used only while no other copy could have changed it
	// (see readAhead).
	copies copies
}

// New builds a forwarder for targets.
func New(arch archetype.Archetype, cfg Config, js jetstream.JetStream, l Deliveries, targets []downstream.Target) *Forwarder {
	arch = arch.WithDefaults()
	f := &Forwarder{cfg: cfg.WithDefaults(), js: js, ledger: l, targets: map[string]downstream.Target{}, log: arch.Logger, metrics: arch.Metrics, now: arch.Now}
	for _, t := range targets {
		f.targets[t.Name()] = t
	}
	f.concurrency = make(map[string]*adaptive, len(targets))
	for _, t := range targets {
		gauge := f.metrics.ConcurrencyLimit.WithLabelValues(t.Name())
		f.concurrency[t.Name()] = newAdaptive(startConcurrency(t), f.workers(t), time.Now, func(n int) { gauge.Set(float64(n)) })
	}
	f.backlog = &backlogWatch{report: f.draining}
	f.limiters = map[string]*rate.Limiter{}
	for name, rl := range f.cfg.RateLimits {
		if !rl.IsZero() {
			f.limiters[name] = rate.NewLimiter(rate.Limit(rl.PerSecond), max(rl.Burst, 1))
		}
	}
	return f
}

// ConsumerName is the durable consumer of a target.
func ConsumerName(target string) string { return "deliver-" + target }

// DefaultWorkers is the most concurrent deliveries per target of an API
// that does not say otherwise. A target starts at StartConcurrency calls in
// flight, and the limit climbs toward the workers only while the API's
// latency stays flat and it refuses nothing (see adaptive).
const DefaultWorkers = 64

// StartConcurrency is the calls in flight an API target starts at: enough
// to hide a commit and a round trip, few enough for the API's rate limits
// before its answers have said anything.
const StartConcurrency = 16

// startConcurrency is where t's limit starts (at most its workers): a
// target that says how many calls it takes (downstream.Parallel, the local
// file) starts there.
func startConcurrency(t downstream.Target) int {
	if p, ok := t.(downstream.Parallel); ok {
		return p.Workers()
	}
	return StartConcurrency
}

// workers is the concurrency of deliveries to t.
func (f *Forwarder) workers(t downstream.Target) int {
	if f.cfg.Workers > 0 {
		return f.cfg.Workers
	}
	if p, ok := t.(downstream.Parallel); ok {
		return p.Workers()
	}
	return DefaultWorkers
}

// consumerSettle is the wait before a consumer that is gone is created
// again (see runTarget).
const consumerSettle = 250 * time.Millisecond

// maxAckPending bounds a target's messages that are out and not yet acked. A
// message handed back for a later retry (NakWithDelay) counts until it is
// delivered again, so the bound must not be near the worker count: with
// 4×workers, requests waiting out a long Retry-After filled the bound and
// stopped every other delivery to their target for as long (decision 0088).
// What the client holds at once is bounded by its pull requests
// (PullMaxMessages), not by this.
const maxAckPending = 1 << 16

// Run delivers until ctx is cancelled, then returns nil, also when that
// happens while it is still creating its consumers. Each target has its own
// durable consumer and workers, so a slow target never holds up another.
func (f *Forwarder) Run(ctx context.Context) error {
	// Create every consumer before delivering anything, so a configuration
	// error stops the forwarder before any target has started.
	consumers := make(map[string]jetstream.Consumer, len(f.targets))
	for name := range f.targets {
		cons, err := f.startConsumer(ctx, name)
		if err != nil {
			if ctx.Err() != nil {
				return nil // stopped while starting: not an error
			}
			return err
		}
		consumers[name] = cons
	}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for name, cons := range consumers {
		wg.Go(func() {
			if err := f.runTarget(ctx, f.targets[name], cons); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	var watch sync.WaitGroup
	stopWatch := make(chan struct{})
	watch.Go(func() { f.backlog.run(stopWatch, time.Now) })
	wg.Wait()
	f.settling.Wait()
	close(stopWatch)
	watch.Wait()
	return errors.Join(errs...)
}

// draining reports a backlog's start or end (backlogWatch).
func (f *Forwarder) draining(on bool, pending uint64) {
	if on {
		f.metrics.Draining.Set(1)
		f.log.Info("forwarder: draining a backlog", "pending", pending)
	} else {
		f.metrics.Draining.Set(0)
		f.log.Info("forwarder: backlog drained")
	}
	if f.cfg.Backlog != nil {
		f.cfg.Backlog(on)
	}
}

// consume runs t's workers on cons until ctx ends or the consumer is gone.
// The workers take messages from an inbox that holds more than there are
// workers (see inbox), so that a worker done with one message finds the
// next waiting.
func (f *Forwarder) consume(ctx context.Context, t downstream.Target, cons jetstream.Consumer) error {
	workers := f.workers(t)
	in := newInbox(workers)
	// pulling ends when ctx does, or when the consumer is found gone; the
	// workers then hand back what is left in the inbox.
	pulling, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan struct{})
	defer close(done)
	go in.keepAlive(f.cfg.AckWait/3, done, func(err error) {
		f.log.Warn("forwarder: extending the ack deadline of a queued message", "target", t.Name(), "err", err)
	})
	go f.checkConsumer(ctx, t, cons, stop, done)
	var wg sync.WaitGroup
	wg.Go(func() {
		f.fill(pulling, t, cons, in)
		stop()
	})
	for range workers {
		wg.Go(func() {
			for {
				it, ok := in.take(f.readAhead)
				if !ok {
					return
				}
				if pulling.Err() != nil {
					// Shutting down, or the consumer is gone: hand the
					// message back for the next run.
					_ = it.msg.Nak()
					f.done(it)
				} else {
					f.handle(pulling, t, it)
				}
				in.release(1)
			}
		})
	}
	wg.Wait()
	return nil
}

// handle delivers one message. Its context is detached from shutdown so an
// attempt that has started is finished and recorded; only a wait for the
// target's rate limit ends with ctx (the message is handed back).
func (f *Forwarder) handle(ctx context.Context, t downstream.Target, it *item) {
	stop := ctx
	ctx = context.WithoutCancel(ctx)
	msg, ref := it.msg, it.ref
	if it.bad != nil {
		f.log.Error("forwarder: undecodable message terminated", "subject", msg.Subject(), "err", it.bad)
		f.metrics.DeadLetters.WithLabelValues(t.Name()).Inc()
		_ = msg.TermWithReason("undecodable ticket")
		return
	}
	if _, dup := f.busy.LoadOrStore(ref.RequestID, struct{}{}); dup {
		// A second copy of a message this process is still handling. Look
		// again later: by then the first copy's outcome is recorded, and this
		// one is skipped as settled (or goes on from what was recorded). The
		// ledger's versioned writes keep copies on different dispatchers
		// apart; this keeps them from costing a refused write here.
		f.log.Info("forwarder: another copy of this message is being handled; looking again later", "target", t.Name(), "request_id", ref.RequestID)
		_ = msg.NakWithDelay(f.cfg.Retry.Delay(1))
		f.done(it)
		return
	}
	a := attempt{f: f, t: t, msg: msg, requestID: ref.RequestID, stop: stop, ahead: f.readAheadFor(it),
		release: func() {
			f.busy.Delete(ref.RequestID)
			f.done(it)
		}}
	ctx, span := startAttempt(ctx, &a)
	err := a.run(ctx)
	if err != nil {
		a.bookkeepingFailed(err)
	}
	tracing.End(span, err)
	if !a.settling {
		a.release()
	}
}
