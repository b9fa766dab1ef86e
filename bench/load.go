package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"ticketrelay/testkit/e2eproc"
)

// Args are create_ticket's arguments as a client sends them; the no-op twin
// and the go-sdk no-op server take the same shape.
type Args struct {
	RequestID string   `json:"request_id"`
	Title     string   `json:"title,omitempty"`
	Ticket    string   `json:"ticket,omitempty"` // add_comment's
	Body      string   `json:"body,omitempty"`
	Priority  string   `json:"priority,omitempty"`
	Labels    []string `json:"labels,omitempty"`
	// Fingerprint groups repeated reports (scenario 13).
	Fingerprint string `json:"fingerprint,omitempty"`
}

// source hands out the arguments of the next call; ok is false once it is
// exhausted.
type source interface {
	next(session int) (a Args, ok bool)
}

// sampleBody is a typical agent-written ticket body (~300 bytes).
const sampleBody = "The nightly export job failed on worker-3 with `context deadline exceeded` " +
	"after 30 minutes.\n\nSteps seen:\n1. export started 02:00 UTC\n2. upstream API answered 503 three times\n" +
	"3. job gave up at 02:31 UTC\n\nImpact: the morning dashboard shows yesterday's numbers. " +
	"Logs: see run 4711."

var priorities = []string{"normal", "high", "low", "normal"}

// freshSource makes new requests with random UUID-like request ids, as an
// agent does for every new ticket.
type freshSource struct{ n atomic.Int64 }

func (s *freshSource) next(session int) (Args, bool) {
	i := s.n.Add(1)
	return Args{
		RequestID: newUUID(),
		Title:     fmt.Sprintf("Nightly export failed on worker-%d (run %d)", session, i),
		Body:      sampleBody,
		Priority:  priorities[i%int64(len(priorities))],
		Labels:    []string{"export", "nightly"},
	}, true
}

// listSource hands out a fixed list once (a replay).
type listSource struct {
	list []Args
	n    atomic.Int64
}

func (s *listSource) next(int) (Args, bool) {
	i := s.n.Add(1) - 1
	if i >= int64(len(s.list)) {
		return Args{}, false
	}
	return s.list[i], true
}

// newUUID returns a random version-4 UUID string.
func newUUID() string {
	var b [16]byte
	rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	var s [36]byte
	hex.Encode(s[0:8], b[0:4])
	s[8] = '-'
	hex.Encode(s[9:13], b[4:6])
	s[13] = '-'
	hex.Encode(s[14:18], b[6:8])
	s[18] = '-'
	hex.Encode(s[19:23], b[8:10])
	s[23] = '-'
	hex.Encode(s[24:], b[10:])
	return string(s[:])
}

// sessions are MCP client sessions, each with its own HTTP client and
// connections, as separate agents would have.
type sessions struct {
	endpoint string
	list     []*mcp.ClientSession
	clients  []*http.Client
}

// connect opens n sessions to the streamable HTTP endpoint, asking for
// protocol (empty: the SDK's latest).
func connect(ctx context.Context, endpoint, protocol string, n int) (*sessions, error) {
	return connectAs(ctx, endpoint, protocol, n, nil)
}

// connectAs is connect with session i sending token(i) as its bearer
// token (none if token is nil).
func connectAs(ctx context.Context, endpoint, protocol string, n int, token func(i int) string) (*sessions, error) {
	s := &sessions{endpoint: endpoint}
	for i := range n {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConnsPerHost = 8
		hc := &http.Client{Transport: tr}
		if token != nil {
			hc.Transport = e2eproc.Bearer{Token: token(i), Next: tr}
		}
		c := mcp.NewClient(&mcp.Implementation{Name: "ticketrelay-loadgen", Version: "1"}, nil)
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		cs, err := c.Connect(cctx, &mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: hc, MaxRetries: -1},
			&mcp.ClientSessionOptions{ProtocolVersion: protocol})
		cancel()
		if err != nil {
			s.close()
			return nil, fmt.Errorf("bench: session %d to %s: %w", i, endpoint, err)
		}
		s.list = append(s.list, cs)
		s.clients = append(s.clients, hc)
	}
	return s, nil
}

func (s *sessions) close() {
	var wg sync.WaitGroup
	for _, cs := range s.list {
		wg.Go(func() { cs.Close() })
	}
	wg.Wait()
	for _, hc := range s.clients {
		hc.CloseIdleConnections()
	}
}

// load is one timed run of calls to one tool.
type load struct {
	tool    string
	src     source
	warmup  time.Duration // calls before this are not measured
	measure time.Duration // length of the measured window
	// rate, if > 0, paces the calls of all sessions together (calls/s);
	// otherwise each session calls back to back (a closed loop).
	rate float64
	// replayed is what every successful answer must say.
	replayed bool
	// cpuOf are the processes whose CPU time is read at both ends of the
	// measured window.
	cpuOf []*proc
	// during, if set, runs in the measured window (a profile download).
	during func(ctx context.Context, window time.Duration)
}

// call is one finished call, its times relative to the start of the run.
type call struct {
	start, end time.Duration
	err        error
	args       Args
}

// outcome is what one run measured.
type outcome struct {
	calls    int           // successful calls that ended in the window
	window   time.Duration // length of the window
	errors   int           // failed calls, all phases
	firstErr error
	lat      []time.Duration // successful calls that started in the window, sorted
	done     []Args          // every successful call (for a replay)
	inWindow []string        // request ids of successful calls that started in the window
	cpu      []time.Duration // CPU used by each of load.cpuOf in the window
	selfCPU  time.Duration   // CPU used by the load generator in the window
}

func (o *outcome) throughput() float64 {
	if o.window <= 0 {
		return 0
	}
	return float64(o.calls) / o.window.Seconds()
}

// cpuPerCall is the CPU of process i per call measured.
func (o *outcome) cpuPerCall(i int) time.Duration {
	if o.calls == 0 || i >= len(o.cpu) {
		return 0
	}
	return o.cpu[i] / time.Duration(o.calls)
}

// merge adds o2 to o (several rounds of the same measurement).
func (o *outcome) merge(o2 *outcome) {
	o.calls += o2.calls
	o.window += o2.window
	o.errors += o2.errors
	if o.firstErr == nil {
		o.firstErr = o2.firstErr
	}
	o.lat = sortDurations(append(o.lat, o2.lat...))
	o.done = append(o.done, o2.done...)
	o.inWindow = append(o.inWindow, o2.inWindow...)
	if len(o.cpu) < len(o2.cpu) {
		o.cpu = append(o.cpu, make([]time.Duration, len(o2.cpu)-len(o.cpu))...)
	}
	for i, c := range o2.cpu {
		o.cpu[i] += c
	}
	o.selfCPU += o2.selfCPU
}

// run drives l over every session and measures it.
func (s *sessions) run(ctx context.Context, l load) (*outcome, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := time.Now()
	wStart := l.warmup
	wEnd := l.warmup + l.measure

	var exhaustOnce sync.Once
	exhausted := make(chan struct{})
	var exhaustedAt atomic.Int64
	markExhausted := func() {
		exhaustOnce.Do(func() {
			exhaustedAt.Store(int64(time.Since(start)))
			close(exhausted)
		})
	}

	var tokens chan struct{}
	if l.rate > 0 {
		tokens = make(chan struct{}, 1<<16)
		go pace(ctx, tokens, start, l.rate, wEnd)
	}

	// Sample CPU at both ends of the window.
	type probe struct {
		at   time.Duration
		cpu  []time.Duration
		self time.Duration
		err  error
	}
	sample := func() probe {
		p := probe{at: time.Since(start)}
		for _, pr := range l.cpuOf {
			c, err := cpuTime(pr.Pid())
			p.cpu = append(p.cpu, c)
			p.err = errors.Join(p.err, err)
		}
		p.self, _ = cpuTime(selfPID)
		return p
	}
	probes := make(chan probe, 2)
	var duringWG sync.WaitGroup
	defer duringWG.Wait()
	go func() {
		if !sleepUntil(ctx, start.Add(wStart)) {
			return
		}
		probes <- sample()
		if l.during != nil {
			duringWG.Go(func() { l.during(context.WithoutCancel(ctx), l.measure) })
		}
		t := time.NewTimer(time.Until(start.Add(wEnd)))
		defer t.Stop()
		select {
		case <-t.C:
		case <-exhausted:
		case <-ctx.Done():
			return
		}
		probes <- sample()
	}()

	results := make([][]call, len(s.list))
	var wg sync.WaitGroup
	for i, cs := range s.list {
		wg.Go(func() {
			for ctx.Err() == nil {
				if time.Since(start) >= wEnd {
					return
				}
				if tokens != nil {
					select {
					case _, ok := <-tokens:
						if !ok {
							return // the pacer has stopped at the end of the window
						}
					case <-ctx.Done():
						return
					}
					if time.Since(start) >= wEnd {
						return
					}
				}
				a, ok := l.src.next(i)
				if !ok {
					markExhausted()
					return
				}
				c := call{start: time.Since(start), args: a}
				res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: l.tool, Arguments: a})
				c.end = time.Since(start)
				c.err = checkResult(res, err, l.replayed)
				results[i] = append(results[i], c)
			}
		})
	}
	wg.Wait()

	o := &outcome{}
	var p0, p1 probe
	// The sampler takes the first probe when the window begins, even if every
	// worker has already stopped; wait for it rather than race it.
	select {
	case p0 = <-probes:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if x := time.Duration(exhaustedAt.Load()); x > 0 && x < wStart {
		return nil, fmt.Errorf("bench: %s: the source ran out %v into a %v warm-up, before the measured window began", l.tool, x, wStart)
	}
	// The sampler takes it at the end of the window (or when the source ran
	// out), which has passed: every worker stops starting calls then.
	select {
	case p1 = <-probes:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if err := errors.Join(p0.err, p1.err); err != nil {
		return nil, fmt.Errorf("bench: %s: reading CPU time: %w", l.tool, err)
	}
	end := wEnd
	if x := time.Duration(exhaustedAt.Load()); x > 0 && x < end {
		end = x
	}
	o.window = end - wStart
	for i := range p0.cpu {
		o.cpu = append(o.cpu, p1.cpu[i]-p0.cpu[i])
	}
	o.selfCPU = p1.self - p0.self
	for _, rs := range results {
		for _, c := range rs {
			if c.err != nil {
				o.errors++
				if o.firstErr == nil {
					o.firstErr = c.err
				}
				continue
			}
			o.done = append(o.done, c.args)
			if c.end >= wStart && c.end <= end {
				o.calls++
			}
			if c.start >= wStart && c.start < end {
				o.lat = append(o.lat, c.end-c.start)
				o.inWindow = append(o.inWindow, c.args.RequestID)
			}
		}
	}
	sortDurations(o.lat)
	return o, nil
}

// pace puts one token in tokens every 1/rate seconds from start until
// until has passed, then closes tokens.
func pace(ctx context.Context, tokens chan<- struct{}, start time.Time, rate float64, until time.Duration) {
	defer close(tokens)
	interval := time.Duration(float64(time.Second) / rate)
	for i := 0; ; i++ {
		at := time.Duration(i) * interval
		if at >= until || !sleepUntil(ctx, start.Add(at)) {
			return
		}
		select {
		case tokens <- struct{}{}:
		default: // every session is busy and the queue is full: drop
		}
	}
}

// sleepUntil waits until t or ctx ends; it reports whether ctx is live.
func sleepUntil(ctx context.Context, t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err() == nil
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// checkResult turns a failed call or an unexpected answer into an error.
func checkResult(res *mcp.CallToolResult, err error, wantReplayed bool) error {
	if err != nil {
		return err
	}
	if res.IsError {
		var b strings.Builder
		for _, c := range res.Content {
			if t, ok := c.(*mcp.TextContent); ok {
				b.WriteString(t.Text)
			}
		}
		return fmt.Errorf("tool error: %s", b.String())
	}
	m, ok := res.StructuredContent.(map[string]any)
	if !ok {
		return fmt.Errorf("no structured result: %T", res.StructuredContent)
	}
	if got, _ := m["replayed"].(bool); got != wantReplayed {
		return fmt.Errorf("replayed = %v, want %v", got, wantReplayed)
	}
	return nil
}
