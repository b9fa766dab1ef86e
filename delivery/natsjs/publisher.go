package natsjs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"ticketrelay/installation"
	"ticketrelay/store/outbox"
	"ticketrelay/tracing"
)

// Publisher publishes outbox rows with Nats-Msg-Id set to the request id
// (outbox.Message.MsgID) and waits until every one is acknowledged.
//
// With AtomicBatches, a batch goes to the stream as one JetStream atomic
// batch: the server stores all of it or none, and under sync_interval:
// always it answers after one fsync for the whole batch instead of one per
// message (nats-server coalesces the sync of an atomic batch on a file
// stream). A batch it refuses, most often because it holds a message id the
// stream already has (a republish after a crash), or that fails on the way,
// is sent again message by message, which reports each duplicate.
//
// A batch smaller than MinAtomicBatch goes message by message even so: an
// atomic batch staged on disk has a fixed cost whatever its size
// (nats-server stages it in a file store of its own, with a directory,
// metadata files and fsyncs of their own), a message published on its own a
// cost per message, so only from some size on does the batch cost less.
// Staged in memory (StageBatchesIn) the fixed cost is smaller, hence
// MemoryMinAtomicBatch (decision 0074 has BenchmarkPublishBatch's figures).
//
// A message the broker answers "no stream" (the stream was deleted, or is
// being put back) tells that messages sent before it may have gone with
// the stream, unanswered: every publish then waiting stops waiting for
// what is not yet answered and reports ErrAbandoned, so that the relay
// publishes those rows again at once instead of after the ack timeout
// (see StreamGone).
type Publisher struct {
	js         jetstream.JetStream
	stallWait  time.Duration
	atomic     bool
	minAtomic  int
	onFallback func(error)
	timeout    time.Duration // for the commit of an atomic batch
	inst       installation.Name
	gone       *StreamGone
}

// ErrAbandoned is the error of a message whose answer was no longer
// awaited: a message sent with it or after it found no stream, so it may
// have gone with the stream. Publishing it again is safe (same message id).
var ErrAbandoned = errors.New("natsjs: answer no longer awaited: the stream was missing for a message sent with or after this one")

var _ outbox.Publisher = (*Publisher)(nil)

// PublisherOption configures a Publisher.
type PublisherOption func(*Publisher)

// AtomicBatches sends batches as JetStream atomic batches. The stream must
// allow them (EnsureStream asks for it; check the answer with
// AllowsAtomicBatches): a server that ignores the batch headers would store
// each message without acknowledging it. onFallback, if not nil, hears of
// every batch sent again message by message, and why.
func AtomicBatches(onFallback func(error)) PublisherOption {
	return func(p *Publisher) { p.atomic, p.onFallback = true, onFallback }
}

// AbandonOn has the publisher hear of "no stream" answers through g, which
// the JetStream context's async error handler feeds too (g.Handler): an
// answer to a message that no publish is waiting for yet (one behind an
// unanswered message of its batch) then counts at once. Default: a
// StreamGone of the publisher's own, fed by the answers it reads.
func AbandonOn(g *StreamGone) PublisherOption {
	return func(p *Publisher) { p.gone = g }
}

// StreamGone says when a message was answered "no stream": the publishes
// waiting then stop waiting (Publisher).
type StreamGone struct {
	mu sync.Mutex
	c  chan struct{} // closed at a "no stream" answer; then replaced
}

// NewStreamGone returns a StreamGone nobody has signalled.
func NewStreamGone() *StreamGone { return &StreamGone{c: make(chan struct{})} }

// Handler is a jetstream.MsgErrHandler (jetstream.WithPublishAsyncErrHandler)
// that signals g at a "no stream" answer.
func (g *StreamGone) Handler(_ jetstream.JetStream, _ *nats.Msg, err error) {
	if errors.Is(err, jetstream.ErrNoStreamResponse) {
		g.signal()
	}
}

// awaiting is the channel that closes at the next signal. Take it before
// sending.
func (g *StreamGone) awaiting() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.c
}

// signal ends the wait of every publish that took awaiting before.
func (g *StreamGone) signal() {
	g.mu.Lock()
	defer g.mu.Unlock()
	close(g.c)
	g.c = make(chan struct{})
}

// MinAtomicBatch sets the fewest messages sent as an atomic batch (default
// DefaultMinAtomicBatch, at least 2); smaller batches go message by message.
func MinAtomicBatch(n int) PublisherOption {
	return func(p *Publisher) { p.minAtomic = max(n, 2) }
}

// ForInstallation publishes on the subjects of installation n (default:
// the embedded server's). An outbox row names its target's subject as
// mcp-front wrote it, with no installation: the publisher puts the
// target under n's subjects.
func ForInstallation(n installation.Name) PublisherOption {
	return func(p *Publisher) { p.inst = n }
}

// MaxAtomicBatch is nats-server's default limit on an atomic batch.
const MaxAtomicBatch = 1000

// DefaultMinAtomicBatch is where an atomic batch starts to cost less than
// publishing its messages one by one, rounded down (see Publisher), when
// the server stages batches on disk.
const DefaultMinAtomicBatch = 8

// MemoryMinAtomicBatch is where an atomic batch staged in memory
// (StageBatchesIn) starts to cost less time than its messages one by one;
// below it one by one also costs about half the CPU, which is what a busy
// machine's lag waits on (BenchmarkPublishBatch; decision 0074 has the
// measurements).
const MemoryMinAtomicBatch = 5

// NewPublisher wraps js. js must be created with
// jetstream.WithPublishAsyncMaxPending ≥ the relay's batch size × pipeline
// depth (else a publish waits up to 5 s for room, then fails) and with
// jetstream.WithPublishAsyncTimeout: Publish waits for every ack until ctx
// ends, so without an ack timeout one lost ack would stall the relay.
func NewPublisher(js jetstream.JetStream, opts ...PublisherOption) *Publisher {
	p := &Publisher{js: js, stallWait: 5 * time.Second, timeout: 10 * time.Second, minAtomic: DefaultMinAtomicBatch, gone: NewStreamGone()}
	for _, o := range opts {
		o(p)
	}
	return p
}

// Publish implements outbox.Publisher.
func (p *Publisher) Publish(ctx context.Context, msgs []outbox.Message) []outbox.PublishResult {
	if !p.atomic {
		return p.publishEach(ctx, msgs)
	}
	results := make([]outbox.PublishResult, 0, len(msgs))
	for chunk := range slices.Chunk(msgs, MaxAtomicBatch) {
		if len(chunk) < p.minAtomic {
			results = append(results, p.publishEach(ctx, chunk)...)
			continue
		}
		last, err := p.publishAtomic(ctx, chunk)
		if err == nil {
			// The server stores an atomic batch at consecutive sequences,
			// the last of which it answers with.
			first := last - uint64(len(chunk)) + 1
			for i := range chunk {
				results = append(results, outbox.PublishResult{Seq: first + uint64(i)})
			}
			continue
		}
		if p.onFallback != nil {
			p.onFallback(err)
		}
		results = append(results, p.publishEach(ctx, chunk)...)
	}
	return results
}

// publishAtomic sends msgs as one atomic batch, waits for the server's
// answer to its commit and returns the stream sequence of the last message.
func (p *Publisher) publishAtomic(ctx context.Context, msgs []outbox.Message) (uint64, error) {
	gone := p.gone.awaiting()
	nc := p.js.Conn()
	batch := nats.NewInbox()[len(nats.InboxPrefix):] // unique, well under the 64-byte limit
	last := len(msgs) - 1
	for i, m := range msgs {
		nm := p.natsMsg(m)
		nm.Header.Set(batchIDHeader, batch)
		nm.Header.Set(batchSeqHeader, strconv.Itoa(i+1))
		if i < last {
			if err := nc.PublishMsg(nm); err != nil {
				return 0, err
			}
			continue
		}
		nm.Header.Set(batchCommitHeader, "1")
		resp, err := p.commit(ctx, nc, nm, gone)
		if err != nil {
			return 0, err
		}
		var ack struct {
			Seq   uint64 `json:"seq"`
			Batch string `json:"batch"`
			Count int    `json:"count"`
			Error *struct {
				Code        int    `json:"err_code"`
				Description string `json:"description"`
			} `json:"error"`
		}
		if err := json.Unmarshal(resp.Data, &ack); err != nil {
			return 0, fmt.Errorf("natsjs: atomic batch answer %q: %w", resp.Data, err)
		}
		if ack.Error != nil {
			return 0, fmt.Errorf("natsjs: atomic batch refused: %s (%d)", ack.Error.Description, ack.Error.Code)
		}
		if ack.Batch != batch || ack.Count != len(msgs) || ack.Seq < uint64(len(msgs)) {
			return 0, fmt.Errorf("natsjs: atomic batch answer %q for batch %s of %d", resp.Data, batch, len(msgs))
		}
		return ack.Seq, nil
	}
	return 0, errors.New("natsjs: empty atomic batch")
}

// commit sends an atomic batch's last message and waits for the answer, up
// to the commit timeout or until gone closes.
func (p *Publisher) commit(ctx context.Context, nc *nats.Conn, nm *nats.Msg, gone <-chan struct{}) (*nats.Msg, error) {
	actx, abandon := context.WithCancelCause(ctx)
	defer abandon(nil)
	cctx, cancel := context.WithTimeout(actx, p.timeout)
	defer cancel()
	go func() {
		select {
		case <-gone:
			abandon(ErrAbandoned)
		case <-cctx.Done():
		}
	}()
	resp, err := nc.RequestMsgWithContext(cctx, nm)
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		p.gone.signal()
	case err != nil && errors.Is(context.Cause(actx), ErrAbandoned):
		err = ErrAbandoned
	}
	return resp, err
}

// PublishedSubject is the subject p publishes an outbox row's message on:
// the installation's.
func (p *Publisher) PublishedSubject(rowSubject string) string {
	return p.inst.Subject(outbox.TargetOf(rowSubject))
}

// natsMsg is m as a NATS message on the installation's subject, with its
// Nats-Msg-Id.
func (p *Publisher) natsMsg(m outbox.Message) *nats.Msg {
	nm := &nats.Msg{Subject: p.PublishedSubject(m.Subject), Data: m.Payload, Header: nats.Header{}}
	nm.Header.Set(jetstream.MsgIDHeader, m.MsgID())
	tracing.SetHeaders(nm.Header, m.TraceParent, m.TraceState)
	return nm
}

// The headers of a JetStream atomic batch.
const (
	batchIDHeader     = "Nats-Batch-Id"
	batchSeqHeader    = "Nats-Batch-Sequence"
	batchCommitHeader = "Nats-Batch-Commit"
)

// publishEach publishes every message on its own, asynchronously.
func (p *Publisher) publishEach(ctx context.Context, msgs []outbox.Message) []outbox.PublishResult {
	gone := p.gone.awaiting()
	results := make([]outbox.PublishResult, len(msgs))
	futures := make([]jetstream.PubAckFuture, len(msgs))
	for i, m := range msgs {
		nm := p.natsMsg(m)
		f, err := p.js.PublishMsgAsync(nm, jetstream.WithStallWait(p.stallWait))
		if err != nil {
			results[i].Err = fmt.Errorf("natsjs: publish %s: %w", m.RequestID, err)
			continue
		}
		futures[i] = f
	}
	for i, f := range futures {
		if f == nil {
			continue
		}
		var err error
		select {
		case ack := <-f.Ok():
			results[i].Duplicate, results[i].Seq = ack.Duplicate, ack.Sequence
		case err = <-f.Err():
		case <-gone:
			err = answered(f, &results[i])
		case <-ctx.Done():
			err = ctx.Err()
		}
		if err != nil {
			if errors.Is(err, jetstream.ErrNoStreamResponse) {
				p.gone.signal()
			}
			results[i].Err = fmt.Errorf("natsjs: publish %s: %w", msgs[i].RequestID, err)
		}
	}
	return results
}

// answered takes f's answer into r if it is in already; else it returns
// ErrAbandoned.
func answered(f jetstream.PubAckFuture, r *outbox.PublishResult) error {
	select {
	case ack := <-f.Ok():
		r.Duplicate, r.Seq = ack.Duplicate, ack.Sequence
		return nil
	case err := <-f.Err():
		return err
	default:
		return ErrAbandoned
	}
}

// StreamChecker answers whether the stream still stores a message: the
// dispatcher's audit asks it about messages published long ago that no
// delivery has been recorded for.
type StreamChecker struct {
	js     jetstream.JetStream
	stream string

	mu sync.Mutex
	s  jetstream.Stream // looked up once: a handle addresses the stream by name
}

// NewStreamChecker checks messages of the named stream.
func NewStreamChecker(js jetstream.JetStream, stream string) *StreamChecker {
	return &StreamChecker{js: js, stream: stream}
}

// Holds reports whether the stream stores the message msgID at seq. A
// sequence that holds another message (the stream was recreated, or lost its
// tail and reused the numbers) is not it.
func (c *StreamChecker) Holds(ctx context.Context, seq uint64, msgID string) (bool, error) {
	s, err := c.handle(ctx)
	if err != nil {
		return false, err
	}
	m, err := s.GetMsg(ctx, seq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("natsjs: read %s sequence %d: %w", c.stream, seq, err)
	}
	return m.Header.Get(jetstream.MsgIDHeader) == msgID, nil
}

func (c *StreamChecker) handle(ctx context.Context) (jetstream.Stream, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.s == nil {
		s, err := c.js.Stream(ctx, c.stream)
		if err != nil {
			return nil, fmt.Errorf("natsjs: stream %s: %w", c.stream, err)
		}
		c.s = s
	}
	return c.s, nil
}
