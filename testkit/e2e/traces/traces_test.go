package traces_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"ticketrelay/delivery/downstream/webhook/webhooktest"
	"ticketrelay/testkit/e2eproc"
	"ticketrelay/testkit/natscluster"
	"ticketrelay/testkit/testwait"
)

// requireEnv names the Jaeger binary (make test-traces builds it). Unset,
// the tests skip.
const requireEnv = "TICKETRELAY_JAEGER"

var frontBin, dispatcherBin, jaegerBin string

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	if jaegerBin = os.Getenv(requireEnv); jaegerBin == "" {
		return m.Run() // the tests skip
	}
	root, err := e2eproc.ModuleRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, "testkit/e2e/traces:", err)
		return 1
	}
	dir, err := os.MkdirTemp("", "ticketrelay-traces-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "testkit/e2e/traces:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	if frontBin, dispatcherBin, err = e2eproc.Build(root, dir); err != nil {
		fmt.Fprintln(os.Stderr, "testkit/e2e/traces:", err)
		return 1
	}
	// natscluster builds nats-server for the multi-host test, and runs m.
	return natscluster.RunTests(m)
}

func needJaeger(t *testing.T) {
	if jaegerBin == "" {
		t.Skip(requireEnv + " is not set: make test-traces builds Jaeger and runs these tests")
	}
}

// downstream is the webhook fake behind a traced front of its own: it
// continues the traceparent each call carries in a server span exported
// to Jaeger as the service "downstream-fake", records it, and answers 503
// to the first failFirst calls.
type downstream struct {
	hook *webhooktest.Fake
	srv  *http.Server
	url  string

	mu          sync.Mutex
	traceparent []string // of each call, in order
	failFirst   int
}

func newDownstream(t *testing.T, j *jaeger, failFirst int) *downstream {
	t.Helper()
	exp, err := otlptracehttp.New(context.Background(), otlptracehttp.WithEndpointURL(j.otlp+"/v1/traces"))
	if err != nil {
		t.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp),
		sdktrace.WithResource(resource.NewWithAttributes(semconv.SchemaURL, semconv.ServiceName("downstream-fake"))))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	tracer := tp.Tracer("downstream-fake")
	prop := propagation.TraceContext{}

	d := &downstream{hook: webhooktest.New(t, webhooktest.Options{Token: "hook-token"}), failFirst: failFirst}
	target, err := url.Parse(d.hook.URL())
	if err != nil {
		t.Fatal(err)
	}
	proxy := &httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) {
		r.SetURL(&url.URL{Scheme: target.Scheme, Host: target.Host})
	}}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := prop.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
		_, span := tracer.Start(ctx, r.Method+" "+r.URL.Path, trace.WithSpanKind(trace.SpanKindServer))
		defer span.End()
		d.mu.Lock()
		d.traceparent = append(d.traceparent, r.Header.Get("traceparent"))
		fail := len(d.traceparent) <= d.failFirst
		d.mu.Unlock()
		if fail {
			http.Error(w, "busy", http.StatusServiceUnavailable)
			return
		}
		proxy.ServeHTTP(w, r)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	d.srv = &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = d.srv.Serve(ln) }()
	t.Cleanup(func() { _ = d.srv.Close() })
	d.url = "http://" + ln.Addr().String() + strings.TrimPrefix(d.hook.URL(), target.Scheme+"://"+target.Host)
	return d
}

// calls is the traceparent of each call the downstream got.
func (d *downstream) calls() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.traceparent...)
}

// system is mcp-front and a dispatcher exporting their traces to j, with
// one webhook target, "ops-hook", whose tool is create_in_ops_hook.
type system struct {
	front, disp *e2eproc.Proc
}

func startSystem(t *testing.T, j *jaeger, d *downstream) *system {
	t.Helper()
	dir := t.TempDir()
	cfg := writeConfig(t, dir, "key_namespace: traces\n", d)
	db := filepath.Join(dir, "tickets.db")
	otel := []string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + j.otlp, "OTEL_TRACES_SAMPLER=parentbased_always_on"}
	disp := e2eproc.Start(t, dir, "dispatcher", dispatcherBin, []string{
		"-data", dir, "-db", db, "-config", cfg,
		"-nats-listen", "127.0.0.1:0", "-metrics-listen", "127.0.0.1:0",
		"-lease-ttl", "2s", "-poll-interval", "5ms", "-retry-base", "100ms", "-retry-max", "200ms",
	}, append([]string{"HOOK_TOKEN=hook-token"}, otel...), "nats", "metrics")
	front := e2eproc.Start(t, dir, "mcp-front", frontBin, []string{
		"-db", db, "-config", cfg, "-listen", "127.0.0.1:0", "-metrics-listen", "127.0.0.1:0",
	}, otel, "mcp", "metrics")
	return &system{front: front, disp: disp}
}

// writeConfig writes, in dir, the configuration of one webhook target,
// "ops-hook" at d, whose tool is create_in_ops_hook, after head; it
// returns its path.
func writeConfig(t *testing.T, dir, head string, d *downstream) string {
	t.Helper()
	cfg := filepath.Join(dir, "ticketrelay.yaml")
	if err := os.WriteFile(cfg, []byte(head+"targets:\n"+
		"  - name: ops-hook\n    kind: webhook\n    endpoint: "+fmt.Sprintf("%q", d.url)+"\n    timeout: 5s\n"+
		"    options: {token_env: HOOK_TOKEN}\n"+
		"tools:\n  - name: create_in_ops_hook\n    target: ops-hook\n    description: File the ticket in ops-hook.\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// headerTransport sends a traceparent header with every request, as Claude
// Code does.
type headerTransport struct{ traceparent string }

func (h headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("traceparent", h.traceparent)
	return http.DefaultTransport.RoundTrip(r)
}

// create calls create_in_ops_hook with meta as the request's _meta, over a
// client that sends header as its traceparent header ("" for none), and
// returns the ticket id.
func (s *system) create(t *testing.T, requestID string, meta mcp.Meta, header string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tr := &mcp.StreamableClientTransport{Endpoint: "http://" + s.front.Addr("mcp") + "/mcp"}
	if header != "" {
		tr.HTTPClient = &http.Client{Transport: headerTransport{header}}
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "traces-test", Version: "1"}, nil).Connect(ctx, tr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Meta: meta, Name: "create_in_ops_hook", Arguments: map[string]any{
		"request_id": requestID, "title": "Disk full on db-7", "body": "Writes fail since 03:12.",
	}})
	if err != nil {
		t.Fatal(err)
	}
	text := res.Content[0].(*mcp.TextContent).Text
	if res.IsError {
		t.Fatalf("create: %s", text)
	}
	i := strings.Index(text, `"ticket_id":"`)
	if i < 0 {
		t.Fatalf("create answered %s", text)
	}
	id := text[i+len(`"ticket_id":"`):]
	return id[:strings.IndexByte(id, '"')]
}

// A caller's trace: its id and the span the tool call must be a child of.
const (
	callerTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	callerSpan  = "00f067aa0ba902b7"
)

// wholePath reports whether tr holds the path of one ticket across the
// three processes: the tool call in mcp-front, the relay's publish, the
// forwarder's attempt and its HTTP call in the dispatcher, and the
// downstream's server span.
func wholePath(tr jtrace) bool {
	want := map[string]bool{
		"mcp-front/tools/call create_in_ops_hook":  false,
		"dispatcher/publish tickets.ops-hook":      false,
		"dispatcher/deliver ops-hook":              false,
		"dispatcher/HTTP POST":                     false,
		"downstream-fake/POST " + webhooktest.Path: false,
	}
	for _, s := range tr.Spans {
		k := tr.service(s) + "/" + s.OperationName
		if _, ok := want[k]; ok {
			want[k] = true
		}
	}
	for _, ok := range want {
		if !ok {
			return false
		}
	}
	return true
}

// span is tr's span of service and operation; it fails t without one.
func span(t *testing.T, tr jtrace, service, op string) jspan {
	t.Helper()
	for _, s := range tr.Spans {
		if tr.service(s) == service && s.OperationName == op {
			return s
		}
	}
	t.Fatalf("no span %s/%s in:\n%s", service, op, describe(tr))
	return jspan{}
}

// childOf reports whether s's parent is span parent of trace traceID.
func childOf(s jspan, traceID, parent string) bool {
	for _, r := range s.References {
		if r.RefType == "CHILD_OF" && r.TraceID == traceID && r.SpanID == parent {
			return true
		}
	}
	return false
}

// linkedTo reports whether s has a link (FOLLOWS_FROM) into trace traceID
// ("": into any trace).
func linkedTo(s jspan, traceID string) bool {
	for _, r := range s.References {
		if r.RefType == "FOLLOWS_FROM" && (traceID == "" || r.TraceID == traceID) {
			return true
		}
	}
	return false
}

// TestCallersTraceReachesTheDownstream sends the caller's trace context in
// the request's _meta (SEP-414), and, in a second call, as the HTTP
// traceparent header only: each ticket's trace, under the caller's trace
// id, runs from the tool call (a child of the caller's span) through the
// relay and the forwarder to the downstream, which got a traceparent of
// that trace. Where both are sent, _meta wins.
func TestCallersTraceReachesTheDownstream(t *testing.T) {
	needJaeger(t)
	j := startJaeger(t)
	d := newDownstream(t, j, 0)
	s := startSystem(t, j, d)

	cases := []struct {
		name, traceID, requestID string
		meta                     mcp.Meta
		header                   string
	}{
		{"_meta", callerTrace, "traces-meta-1",
			mcp.Meta{"traceparent": "00-" + callerTrace + "-" + callerSpan + "-01", "tracestate": "vendor=1"},
			"00-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa-" + callerSpan + "-01"},
		{"header", "5cf92f3577b34da6a3ce929d0e0e4737", "traces-header-1",
			nil, "00-5cf92f3577b34da6a3ce929d0e0e4737-" + callerSpan + "-01"},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ticketID := s.create(t, c.requestID, c.meta, c.header)
			tr := j.waitTrace(t, c.traceID, "the whole path", wholePath)
			call := span(t, tr, "mcp-front", "tools/call create_in_ops_hook")
			if !childOf(call, c.traceID, callerSpan) {
				t.Errorf("the tool call's span is not a child of the caller's span %s: %+v", callerSpan, call.References)
			}
			if got := call.tag("ticketrelay.ticket_id"); got != ticketID {
				t.Errorf("tool call span's ticket id %q, want %q", got, ticketID)
			}
			if got := call.tag("ticketrelay.request_id"); got != c.requestID {
				t.Errorf("tool call span's request id %q, want %q", got, c.requestID)
			}
			attempt := span(t, tr, "dispatcher", "deliver ops-hook")
			if got := attempt.tag("ticketrelay.outcome"); got != "delivered" {
				t.Errorf("attempt outcome %q, want delivered", got)
			}
			if got := attempt.tag("ticketrelay.attempt"); got != "1" {
				t.Errorf("attempt number %q, want 1", got)
			}
			calls := d.calls()
			if len(calls) != i+1 || !strings.Contains(calls[i], c.traceID) {
				t.Errorf("the downstream's calls carried %q, want call %d in trace %s", calls, i+1, c.traceID)
			}
			// The group commit is a trace of its own, linked both ways.
			if !linkedTo(call, "") {
				t.Errorf("the tool call's span has no link to its commit: %+v", call.References)
			}
			for _, s := range tr.Spans {
				for _, tag := range s.Tags {
					if v := fmt.Sprint(tag.Value); strings.Contains(v, "Writes fail") || strings.Contains(v, "hook-token") {
						t.Errorf("span %s carries the ticket's body or a secret in %s", s.OperationName, tag.Key)
					}
				}
			}
		})
	}
}

// TestRetryIsANewTraceLinkedToTheFirst has the downstream answer 503 to
// the first call: the retry after the backoff is a trace of its own whose
// attempt span links to the ticket's trace, which stays whole.
func TestRetryIsANewTraceLinkedToTheFirst(t *testing.T) {
	needJaeger(t)
	j := startJaeger(t)
	d := newDownstream(t, j, 1)
	s := startSystem(t, j, d)

	s.create(t, "traces-retry-1", mcp.Meta{"traceparent": "00-" + callerTrace + "-" + callerSpan + "-01"}, "")
	testwait.For(t, 60*time.Second, "a second call to the downstream", func() bool { return len(d.calls()) >= 2 })
	calls := d.calls()
	if !strings.Contains(calls[0], callerTrace) {
		t.Fatalf("first call's traceparent %q, want the caller's trace %s", calls[0], callerTrace)
	}
	retryTrace := strings.Split(calls[1], "-")
	if len(retryTrace) != 4 || retryTrace[1] == callerTrace {
		t.Fatalf("the retry's traceparent %q: want a new trace", calls[1])
	}
	first := j.waitTrace(t, callerTrace, "the first attempt", attemptEnded("retrying"))
	if got := span(t, first, "dispatcher", "deliver ops-hook").tag("ticketrelay.attempt"); got != "1" {
		t.Errorf("first attempt numbered %q", got)
	}
	retry := j.waitTrace(t, retryTrace[1], "the retry delivered", attemptEnded("delivered"))
	attempt := span(t, retry, "dispatcher", "deliver ops-hook")
	if !linkedTo(attempt, callerTrace) {
		t.Errorf("the retry's attempt does not link to the ticket's trace %s: %+v", callerTrace, attempt.References)
	}
	if got := attempt.tag("ticketrelay.attempt"); got != "2" {
		t.Errorf("retry numbered %q, want 2", got)
	}
	span(t, retry, "downstream-fake", "POST "+webhooktest.Path)
}

// attemptEnded is a trace that holds an attempt span with outcome.
func attemptEnded(outcome string) func(jtrace) bool {
	return func(tr jtrace) bool {
		for _, s := range tr.Spans {
			if s.OperationName == "deliver ops-hook" && s.tag("ticketrelay.outcome") == outcome {
				return true
			}
		}
		return false
	}
}
