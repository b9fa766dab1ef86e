package forwarder

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"

	"ticketrelay/delivery/downstream"
	"ticketrelay/internal/failpoint"
	"ticketrelay/metrics"
	"ticketrelay/request"
	"ticketrelay/tracing"
)

// attempt is the handling of one message of one target.
type attempt struct {
	f         *Forwarder
	t         downstream.Target
	msg       jetstream.Msg
	requestID string          // the message names the request; its ledger row holds the ticket
	release   func()          // ends this process's handling of the request (Forwarder.busy)
	stop      context.Context // ends when the forwarder stops taking messages: a rate-limit wait ends with it
	settling  bool            // the outcome is committing: its callback releases
	// call is the place under the target's concurrency limit that pace
	// took for the next downstream call; run frees it if no call used it.
	call *call
	// ahead is the request's record read ahead with other messages' (see
	// readAhead); nil: run reads it.
	ahead *request.Prior
	// trace is the attempt's span (tracing), named in its log lines.
	trace trace.SpanContext
	alive struct { // keepAlive's timer
		mu      sync.Mutex
		stopped bool
		t       *time.Timer
	}
	// action is the comment or update the message asks for; nil for a
	// create (beyond.go).
	action *action
}

// log is the forwarder's logger with the attempt's target and request id.
// Made when something is logged, not for every attempt: an attempt that
// goes well logs nothing at the default level, and slog's With formats its
// attributes at once.
func (a *attempt) log() *slog.Logger {
	return tracing.Logger(a.f.log, a.trace).With("target", a.t.Name(), "request_id", a.requestID)
}

// maxRetryDelay caps the wait an API may ask for (Retry-After): a date
// centuries ahead overflowed next_attempt_at into the past, and the
// message held its place among the target's unacknowledged ones for good.
const maxRetryDelay = 24 * time.Hour

// exhausted says that a record's attempts ran out: how many counted toward
// the limit, and how many more a rate limit refused.
func exhausted(d request.Delivery) string {
	if d.Throttled == 0 {
		return fmt.Sprintf("%d attempts exhausted", d.Attempts)
	}
	return fmt.Sprintf("%d attempts exhausted (and %d more refused by a rate limit)", d.Counted(), d.Throttled)
}

// skipUnknown says why a message names a request the store does not hold.
// A row is pruned only once its delivery is settled and -retention has
// passed since it was accepted: a message older than that was settled and
// forgotten (a replayed stream, a consumer reset), which is expected. A
// younger one was never accepted by this installation: someone who reaches
// the broker published it on the installation's subject.
func (a *attempt) skipUnknown() {
	md, err := a.msg.Metadata()
	if err == nil && a.f.cfg.Retention > 0 && a.f.now().Sub(md.Timestamp) >= a.f.cfg.Retention {
		a.log().Info("forwarder: message for a request settled and pruned after -retention; skipped", "published_at", md.Timestamp)
		return
	}
	a.log().Error("forwarder: message for a request this installation never accepted (published by someone else "+
		"on its subject); not delivered", "subject", a.msg.Subject())
}

// callEndSlack covers a downstream call's cancellation taking effect after
// its deadline.
const callEndSlack = time.Second

func (a *attempt) run(ctx context.Context) error {
	// From the first step on: the claim's commit can wait on the write lock.
	a.keepAlive()
	defer a.stopKeepAlive()
	defer a.freeCall()
	p, err := a.prior(ctx)
	if err != nil {
		return err
	}
	if done, err := a.turnedAway(p); done {
		return err
	}
	if done, err := a.onTicket(ctx, p); done {
		return err
	}
	return a.deliver(ctx, p)
}

// turnedAway settles a message that must not reach the downstream now, and
// reports whether it did: its outcome is known, its request was never
// accepted here, its retry time has not come, or it names another target.
func (a *attempt) turnedAway(p request.Prior) (bool, error) {
	prev, found := p.Delivery, p.Found
	if found && prev.Settled() {
		// A redelivery (lost ack, republish after the duplicate window):
		// the ledger already knows the outcome; the downstream is not called.
		a.f.metrics.RedeliveredSkipped.WithLabelValues(a.t.Name()).Inc()
		return true, a.ack()
	}
	if !p.Accepted {
		// Never deliver a ticket the store does not hold. Which case it is
		// decides what an operator should do, so the log says which.
		a.skipUnknown()
		a.f.metrics.RedeliveredSkipped.WithLabelValues(a.t.Name()).Inc()
		return true, a.ack()
	}
	if found && !prev.NextAttemptAt.IsZero() {
		if wait := prev.NextAttemptAt.Sub(a.f.now()); wait > 0 {
			// A copy back before its retry time (a consumer created again
			// starts from the first message): it waits, as Retry-After and
			// the backoff said.
			return true, a.msg.NakWithDelay(wait)
		}
	}
	if p.Ticket.Target != a.t.Name() {
		// The relay publishes a request on its own target's subject only:
		// this message was published by someone else (the stream is open
		// to whoever reaches the NATS port). The ledger says where the
		// ticket goes; never deliver it anywhere else.
		a.log().Error("forwarder: message on another target's subject; not delivered here", "ticket_target", p.Ticket.Target)
		a.f.metrics.RedeliveredSkipped.WithLabelValues(a.t.Name()).Inc()
		return true, a.msg.TermWithReason("wrong target")
	}
	return false, nil
}

// deliver makes the call for an accepted request whose turn has come:
// reconciling first an earlier call of unknown outcome toward a target
// without a dedupe key, and recording the attempt before such a call.
func (a *attempt) deliver(ctx context.Context, p request.Prior) error {
	prev, found := p.Delivery, p.Found
	caps := a.capabilities()
	d := downstream.Delivery{
		Key:     downstream.Key(a.f.cfg.KeyNamespace, a.requestID),
		Attempt: prev.Attempts + 1,
		// From the caller recorded with the ticket: every attempt, on any
		// host, sends the same content.
		Ticket: downstream.Present(a.f.cfg.Callers[a.t.Name()], p.Ticket),
	}
	rec := request.Delivery{RequestID: a.requestID, Target: a.t.Name(), Attempts: d.Attempt, Throttled: prev.Throttled, Version: prev.Version}
	tracing.Attempt(ctx, d.Attempt)

	if !caps.DedupeKey && found && prev.State == request.DeliveryAttempting {
		if wait := a.untilCallEnded(prev); wait > 0 {
			a.log().Info("forwarder: an attempt's call may still be running; looking again once it has ended", "wait", wait)
			return a.msg.NakWithDelay(wait)
		}
		// An earlier call may have created the item.
		done, err := a.reconcile(ctx, caps, d, prev)
		if done || err != nil {
			return err
		}
	}
	// The target's rate limit is waited for before the call's time starts
	// and before its claim is written: the wait is not the call's, and a
	// claim stands for a call that is running.
	if !a.pace() {
		return nil
	}
	// The call ends DeliveryTimeout after start. For a target without a key
	// start is taken just before the claim is written (below): the claim's
	// updated_at is later still, so another copy that waits until
	// updated_at+DeliveryTimeout never overlaps the call. The call's time
	// starts here, not before a lookup that may have taken most of it.
	start := time.Now()
	if !caps.DedupeKey {
		// Record the attempt before the call: a crash during the call leaves
		// "attempting", which the next delivery reconciles instead of
		// resending. The write is conditional on the version read: of two
		// copies of the message only one gets to call.
		rec.State = request.DeliveryAttempting
		if err := a.record(ctx, &rec); err != nil {
			return err
		}
	}

	a.f.metrics.DeliveryAttempts.WithLabelValues(a.t.Name()).Inc()
	cctx, cancel := context.WithDeadline(ctx, start.Add(a.f.cfg.DeliveryTimeout))
	receipt, err := a.act(cctx, d)
	cancel()
	a.answered(err)
	took := time.Since(start)
	tracing.Observe(ctx, a.f.metrics.DeliveryDuration.WithLabelValues(a.t.Name()), took.Seconds())
	failpoint.Hit(failpoint.ForwarderAfterDeliver)
	// The record that ends the call keeps it in the request's history.
	rec.Attempt = &request.Attempt{At: start, Latency: took, Host: a.f.cfg.Host}
	if err == nil {
		return a.delivered(ctx, rec, receipt)
	}
	e := downstream.Classify(err)
	rec.Attempt.HTTPStatus, rec.Attempt.Class, rec.Attempt.Error = e.StatusCode, e.Class.String(), e.Error()
	return a.failed(ctx, caps, rec, e)
}

// prior is the request's ticket and delivery record: read ahead, or read
// now.
func (a *attempt) prior(ctx context.Context) (request.Prior, error) {
	if a.ahead != nil {
		a.f.metrics.ReadAhead.WithLabelValues(a.t.Name()).Inc()
		return *a.ahead, nil
	}
	return a.f.ledger.PriorDelivery(ctx, a.requestID)
}

// reconcile settles an attempt of unknown outcome toward a target without a
// dedupe key. It reports done when the message needs no new call.
func (a *attempt) reconcile(ctx context.Context, caps downstream.Capabilities, d downstream.Delivery, prev request.Delivery) (bool, error) {
	find, ok := a.finder()
	if !ok || caps.Lookup != downstream.LookupConsistent {
		// No proof either way: never resend blindly.
		return true, a.uncertain(ctx, prev, fmt.Sprintf("attempt %d ended without an answer and %s has no consistent lookup", prev.Attempts, a.t.Name()))
	}
	if !a.pace() {
		return true, nil
	}
	lctx, cancel := context.WithTimeout(ctx, a.f.cfg.DeliveryTimeout)
	receipt, found, err := find(lctx, d)
	cancel()
	a.answered(err)
	if err != nil {
		e := downstream.Classify(err)
		a.log().Warn("forwarder: lookup before resend failed", "err", e)
		if e.Class != downstream.Transient {
			// A lookup refused for good (credentials, a project that is
			// gone) would be refused on every retry, and without it the
			// earlier attempt's outcome stays unknown: an operator decides.
			if e.Class == downstream.Auth {
				a.f.metrics.AuthFailures.WithLabelValues(a.t.Name()).Inc()
			}
			return true, a.uncertain(ctx, prev, fmt.Sprintf("attempt %d ended without an answer and the lookup that would prove its outcome failed: %s",
				prev.Attempts, e))
		}
		delay := a.f.cfg.Retry.Delay(prev.Attempts)
		prev.LastError = "lookup failed: " + e.Error()
		prev.NextAttemptAt = a.f.now().Add(delay)
		if err := a.record(ctx, &prev); err != nil {
			return true, err
		}
		return true, a.msg.NakWithDelay(delay)
	}
	if found {
		prev.Attempts = max(prev.Attempts, 1)
		return true, a.delivered(ctx, prev, receipt)
	}
	if prev.Counted() >= a.f.cfg.MaxAttempts {
		prev.LastError = fmt.Sprintf("%s (the last one proven not to have created the item); last error: %s",
			exhausted(prev), prev.LastError)
		prev.Failure = request.FailureExhausted
		return true, a.dead(ctx, prev, "exhausted")
	}
	return false, nil // proven absent: create it
}

// delivered records the delivery and acks the message once the record is
// durable. The worker does not wait for that commit (about one and a half
// group commits behind mcp-front's on the write lock, most of an attempt;
// decision 0075 has the measurements) and takes the next message; until the
// record is durable the message stays unacknowledged in JetStream, as before.
func (a *attempt) delivered(ctx context.Context, rec request.Delivery, r downstream.Receipt) error {
	rec.State = string(request.StatusDelivered)
	tracing.Outcome(ctx, metrics.OutcomeDelivered)
	rec.ExternalID, rec.ExternalURL = r.ExternalID, r.URL
	rec.LastError, rec.NextAttemptAt = "", time.Time{}
	a.f.settling.Add(1)
	err := a.f.ledger.RecordDeliveryThen(ctx, rec, func(err error) {
		defer a.f.settling.Done()
		defer a.release()
		switch {
		case errors.Is(err, request.ErrStale):
			// Only a record that says delivered refuses a delivery: another
			// copy recorded it first (with a dedupe key, the same item).
			a.log().Info("delivered; another copy of the message had recorded it first", "external_id", r.ExternalID)
			a.ack()
		case err != nil:
			a.bookkeepingFailed(err)
		default:
			a.f.metrics.Deliveries.WithLabelValues(a.t.Name(), metrics.OutcomeDelivered).Inc()
			// Debug: a line per ticket is thousands a second in a backlog; the
			// ledger keeps each delivery (find_request) and the metrics count them.
			if a.f.log.Enabled(ctx, slog.LevelDebug) {
				a.log().Debug("delivered", "external_id", r.ExternalID, "attempt", rec.Attempts)
			}
			a.ack()
		}
	})
	if err != nil {
		a.f.settling.Done()
		return err
	}
	a.settling = true
	return nil
}

// record writes rec if the record is still at the version rec was read (or
// last written) at, and moves rec.Version on; request.ErrStale if another
// copy of the message, or an operator, changed it first.
func (a *attempt) record(ctx context.Context, rec *request.Delivery) error {
	if err := a.f.ledger.RecordDelivery(ctx, *rec); err != nil {
		return err
	}
	rec.Version++
	return nil
}

// untilCallEnded is how long an "attempting" record may still stand for a
// call in progress. A claim (no retry time set) is followed by one call
// that ends DeliveryTimeout after the claim at the latest; until then
// another copy of the message (on another dispatcher, or a redelivery here
// after a restart) must neither look the outcome up nor declare it
// uncertain: the call may still create the item. A claim a crashed
// dispatcher left is reconciled once that time has passed. An attempt that
// ended and waits for its retry has a retry time.
func (a *attempt) untilCallEnded(prev request.Delivery) time.Duration {
	if !prev.NextAttemptAt.IsZero() {
		return 0
	}
	return prev.UpdatedAt.Add(a.f.cfg.DeliveryTimeout + callEndSlack).Sub(a.f.now())
}

func (a *attempt) failed(ctx context.Context, caps downstream.Capabilities, rec request.Delivery, e *downstream.Error) error {
	rec.LastError = e.Error()
	switch {
	case e.Class == downstream.Auth:
		a.f.metrics.AuthFailures.WithLabelValues(a.t.Name()).Inc()
		rec.Failure = failureOf(e)
		return a.dead(ctx, rec, "auth")
	case e.Class != downstream.Transient:
		rec.Failure = failureOf(e)
		return a.dead(ctx, rec, e.Class.String())
	case !caps.DedupeKey && e.MayHaveActed && caps.Lookup != downstream.LookupConsistent:
		return a.uncertain(ctx, rec, fmt.Sprintf("attempt %d may have created the item (%s) and %s has no consistent lookup",
			rec.Attempts, e, a.t.Name()))
	case !caps.DedupeKey && e.MayHaveActed:
		// Leave "attempting": the next delivery looks it up before any resend.
		rec.State = request.DeliveryAttempting
	case e.Throttled && !e.MayHaveActed:
		// The API asked us to slow down: nothing is wrong with the request,
		// so it waits (as long as the API says, and longer each time) and
		// keeps its attempts, however long the limit lasts.
		rec.Throttled++
		rec.State = string(request.StatusRetrying)
	case rec.Counted() >= a.f.cfg.MaxAttempts:
		rec.LastError = fmt.Sprintf("%s; last error: %s", exhausted(rec), rec.LastError)
		rec.Failure = request.FailureExhausted
		return a.dead(ctx, rec, "exhausted")
	default:
		rec.State = string(request.StatusRetrying)
	}
	delay := min(max(a.f.cfg.Retry.Delay(rec.Attempts), e.RetryAfter), maxRetryDelay)
	rec.NextAttemptAt = a.f.now().Add(delay)
	if err := a.record(ctx, &rec); err != nil {
		return err
	}
	a.f.metrics.Deliveries.WithLabelValues(a.t.Name(), metrics.OutcomeRetrying).Inc()
	tracing.Outcome(ctx, metrics.OutcomeRetrying)
	a.log().Warn("delivery failed; will retry", "attempt", rec.Attempts, "retry_in", delay, "err", e)
	return a.msg.NakWithDelay(delay)
}

func (a *attempt) dead(ctx context.Context, rec request.Delivery, why string) error {
	rec.State = string(request.StatusFailed)
	rec.NextAttemptAt = time.Time{}
	if err := a.record(ctx, &rec); err != nil {
		return err
	}
	a.f.metrics.Deliveries.WithLabelValues(a.t.Name(), metrics.OutcomeFailed).Inc()
	tracing.Outcome(ctx, metrics.OutcomeFailed)
	a.f.metrics.DeadLetters.WithLabelValues(a.t.Name()).Inc()
	a.log().Error("delivery failed permanently", "why", why, "attempt", rec.Attempts, "err", rec.LastError)
	// The message stays in the stream (Limits retention) for a redrive.
	return a.msg.TermWithReason(why)
}

func (a *attempt) uncertain(ctx context.Context, rec request.Delivery, why string) error {
	rec.State = string(request.StatusUncertain)
	rec.LastError = why
	rec.NextAttemptAt = time.Time{}
	if err := a.record(ctx, &rec); err != nil {
		return err
	}
	a.f.metrics.Deliveries.WithLabelValues(a.t.Name(), metrics.OutcomeUncertain).Inc()
	tracing.Outcome(ctx, metrics.OutcomeUncertain)
	a.f.metrics.Uncertain.WithLabelValues(a.t.Name()).Inc()
	a.log().Warn("delivery uncertain", "why", why)
	return a.ack()
}
