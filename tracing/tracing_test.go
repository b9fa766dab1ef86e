package tracing_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"ticketrelay/tracing"
	"ticketrelay/tracing/tracingtest"
)

func env(kv ...string) func(string) (string, bool) {
	m := map[string]string{}
	for i := 0; i < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestFromEnv(t *testing.T) {
	off := []func(string) (string, bool){
		env(),
		env("OTEL_SERVICE_NAME", "x", "OTEL_TRACES_SAMPLER", "always_on"),
		env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318", "OTEL_TRACES_EXPORTER", "none"),
		env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318", "OTEL_SDK_DISABLED", "true"),
	}
	for i, e := range off {
		if _, ok, err := tracing.FromEnv(e, "svc"); ok || err != nil {
			t.Errorf("case %d: on=%v err=%v, want off", i, ok, err)
		}
	}
	c, ok, err := tracing.FromEnv(env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318/",
		"OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=prod,service.name=from-attrs,team=a%20b",
		"OTEL_TRACES_SAMPLER", "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG", "0.25"), "mcp-front")
	if err != nil || !ok {
		t.Fatalf("on=%v err=%v", ok, err)
	}
	if c.Endpoint != "http://127.0.0.1:4318/v1/traces" || c.Service != "from-attrs" || len(c.Attrs) != 2 ||
		c.Attrs[1].Value.AsString() != "a b" || !strings.Contains(c.Sampler.Description(), "0.25") {
		t.Errorf("config %+v (sampler %s)", c, c.Sampler.Description())
	}
	c, _, _ = tracing.FromEnv(env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "https://collector/custom", "OTEL_SERVICE_NAME", "named",
		"OTEL_RESOURCE_ATTRIBUTES", "service.name=ignored"), "dispatcher")
	if c.Endpoint != "https://collector/custom" || c.Service != "named" {
		t.Errorf("config %+v", c)
	}
	c, ok, _ = tracing.FromEnv(env("OTEL_TRACES_EXPORTER", "otlp"), "dispatcher")
	if !ok || c.Endpoint != "http://localhost:4318/v1/traces" || c.Service != "dispatcher" {
		t.Errorf("otlp alone: on=%v %+v", ok, c)
	}

	bad := map[string]func(string) (string, bool){
		"OTEL_TRACES_EXPORTER":        env("OTEL_TRACES_EXPORTER", "zipkin"),
		"OTEL_EXPORTER_OTLP_PROTOCOL": env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://h:4318", "OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
		"OTLP endpoint":               env("OTEL_EXPORTER_OTLP_ENDPOINT", "127.0.0.1:4318"),
		"OTEL_TRACES_SAMPLER=":        env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://h:4318", "OTEL_TRACES_SAMPLER", "jaeger_remote"),
		"OTEL_TRACES_SAMPLER_ARG":     env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://h:4318", "OTEL_TRACES_SAMPLER", "traceidratio", "OTEL_TRACES_SAMPLER_ARG", "2"),
		"OTEL_RESOURCE_ATTRIBUTES":    env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://h:4318", "OTEL_RESOURCE_ATTRIBUTES", "novalue"),
	}
	for name, e := range bad {
		_, ok, err := tracing.FromEnv(e, "svc")
		if ok || !errors.Is(err, tracing.ErrConfig) || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: on=%v err=%v, want an error naming it", name, ok, err)
		}
	}
}

// Off, the calls on a ticket's path allocate nothing and hand back what
// they were given.
func TestOffCostsNothing(t *testing.T) {
	ctx := context.Background()
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "h"})
	rt := http.DefaultTransport
	if tracing.Transport(rt, "x") != rt {
		t.Error("Transport wrapped the transport while tracing is off")
	}
	hdr := map[string][]string{"traceparent": {"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}}
	allocs := testing.AllocsPerRun(100, func() {
		c, s := tracing.StartToolCall(ctx, "create_ticket", nil, nil)
		tracing.Request(c, "r", "t", "x")
		tracing.Outcome(c, "created")
		s.End()
		c, s = tracing.StartAttempt(ctx, hdr, 1, "x", "r")
		tracing.Attempt(c, 1)
		tracing.Observe(c, h, 1)
		tracing.End(s, nil)
		tracing.EndCommit(tracing.StartCommit(3, func(int) trace.Span { return s }), nil)
		if sp, p, _ := tracing.StartPublish("r", "tickets.x", 0, "", ""); sp != nil || p != "" {
			t.Fatal("publish span while off")
		}
		if p, _ := tracing.Stored(c); p != "" {
			t.Fatal("stored a trace context while off")
		}
		if tracing.Caller(c) != nil {
			t.Fatal("a calling span for the commit while off")
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations per ticket while tracing is off", allocs)
	}
}

func enable(t *testing.T) *tracetest.InMemoryExporter {
	exp, _ := tracingtest.Enable(t, "test-host")
	return exp
}

const (
	metaParent   = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	headerParent = "00-5cf92f3577b34da6a3ce929d0e0e4737-00f067aa0ba902b8-01"
)

// The caller's context: _meta first, then the HTTP header, else a new trace.
func TestToolCallContinuesTheCallersTrace(t *testing.T) {
	enable(t)
	ctx := context.Background()
	header := http.Header{"Traceparent": {headerParent}}
	_, s := tracing.StartToolCall(ctx, "create_ticket", map[string]any{"traceparent": metaParent}, header)
	if got := s.SpanContext().TraceID().String(); got != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Errorf("with _meta and header: trace %s, want _meta's", got)
	}
	_, s = tracing.StartToolCall(ctx, "create_ticket", map[string]any{"progressToken": 1}, header)
	if got := s.SpanContext().TraceID().String(); got != "5cf92f3577b34da6a3ce929d0e0e4737" {
		t.Errorf("with the header only: trace %s, want the header's", got)
	}
	_, s = tracing.StartToolCall(ctx, "create_ticket", map[string]any{"traceparent": "garbage"}, header)
	if got := s.SpanContext().TraceID().String(); got != "5cf92f3577b34da6a3ce929d0e0e4737" {
		t.Errorf("with a malformed _meta: trace %s, want the header's", got)
	}
	_, s = tracing.StartToolCall(ctx, "create_ticket", nil, nil)
	if id := s.SpanContext().TraceID().String(); !s.SpanContext().IsValid() || id == "4bf92f3577b34da6a3ce929d0e0e4736" || id == "5cf92f3577b34da6a3ce929d0e0e4737" {
		t.Errorf("without a caller's context: trace %s, want a new one", id)
	}
}

// One group commit serves several calls: linked both ways, a child of none.
func TestCommitLinksItsCalls(t *testing.T) {
	exp := enable(t)
	ctx := context.Background()
	_, a := tracing.StartToolCall(ctx, "create_ticket", nil, nil)
	_, b := tracing.StartToolCall(ctx, "create_ticket", nil, nil)
	calls := []trace.Span{a, nil, b}
	c := tracing.StartCommit(len(calls), func(i int) trace.Span { return calls[i] })
	tracing.EndCommit(c, nil)
	a.End()
	b.End()
	spans := exp.GetSpans()
	var commit tracetest.SpanStub
	for _, s := range spans {
		if s.Name == "ledger commit" {
			commit = s
		}
	}
	if commit.Parent.IsValid() || len(commit.Links) != 2 || commit.Links[0].SpanContext.SpanID() != a.SpanContext().SpanID() {
		t.Fatalf("commit span %+v", commit)
	}
	for _, s := range spans {
		if s.Name != "ledger commit" && (len(s.Links) != 1 || s.Links[0].SpanContext.SpanID() != commit.SpanContext.SpanID()) {
			t.Errorf("call %s links %+v, want its commit", s.SpanContext.SpanID(), s.Links)
		}
	}
}

// A first publish and a first delivery continue the ticket's trace; a
// redrive and a redelivery start a new one linked to it.
func TestRedeliveriesAreNewTracesLinked(t *testing.T) {
	exp := enable(t)
	ctx := context.Background()
	_, call := tracing.StartToolCall(ctx, "create_ticket", nil, nil)
	tp, ts := tracing.Stored(trace.ContextWithSpan(ctx, call))
	origin := call.SpanContext().TraceID()

	pub, sendP, _ := tracing.StartPublish("r", "tickets.x", 0, tp, ts)
	if pub.SpanContext().TraceID() != origin || sendP == tp {
		t.Errorf("first publish: trace %s, sends %s", pub.SpanContext().TraceID(), sendP)
	}
	redrive, redriveP, _ := tracing.StartPublish("r", "tickets.x", 1, tp, ts)
	if redrive.SpanContext().TraceID() == origin || strings.Contains(redriveP, origin.String()) {
		t.Errorf("redrive kept the original trace %s", origin)
	}
	h := map[string][]string{}
	tracing.SetHeaders(h, sendP, "")
	_, first := tracing.StartAttempt(ctx, h, 1, "x", "r")
	_, again := tracing.StartAttempt(ctx, h, 2, "x", "r")
	if first.SpanContext().TraceID() != origin || again.SpanContext().TraceID() == origin {
		t.Errorf("first delivery in %s, redelivery in %s; origin %s", first.SpanContext().TraceID(), again.SpanContext().TraceID(), origin)
	}
	for _, s := range []trace.Span{pub, redrive, first, again, call} {
		s.End()
	}
	for _, s := range exp.GetSpans() {
		if s.SpanContext.TraceID() == origin {
			continue
		}
		if len(s.Links) != 1 || s.Links[0].SpanContext.TraceID() != origin {
			t.Errorf("%s in a new trace without a link to the original: %+v", s.Name, s.Links)
		}
	}
}

// The transport gives the downstream the attempt's traceparent, on a copy
// of the request, and names the host only.
func TestTransportSendsTraceparent(t *testing.T) {
	exp := enable(t)
	var got string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.Header.Get("traceparent")
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	ctx, attempt := tracing.StartAttempt(context.Background(), nil, 1, "x", "r")
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/projects/secret-name?api_key=k", nil)
	resp, err := (&http.Client{Transport: tracing.Transport(http.DefaultTransport, "x")}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	attempt.End()
	if req.Header.Get("traceparent") != "" {
		t.Error("the caller's request was changed")
	}
	if !strings.Contains(got, attempt.SpanContext().TraceID().String()) {
		t.Errorf("downstream got traceparent %q, want the attempt's trace", got)
	}
	for _, s := range exp.GetSpans() {
		for _, a := range s.Attributes {
			if strings.Contains(a.Value.String(), "secret-name") || strings.Contains(a.Value.String(), "api_key") {
				t.Errorf("span %s names the URL's path or query: %s", s.Name, a.Key)
			}
		}
		if s.Name == "HTTP POST" && (s.Parent.SpanID() != attempt.SpanContext().SpanID() || s.Status.Description != "503") {
			t.Errorf("HTTP span %+v", s)
		}
	}
}

func TestLogsAndExemplarsCarryTheTrace(t *testing.T) {
	enable(t)
	ctx, s := tracing.StartToolCall(context.Background(), "create_ticket", nil, nil)
	defer s.End()
	id := s.SpanContext().TraceID().String()
	var buf bytes.Buffer
	log := slog.New(tracing.LogHandler(slog.NewTextHandler(&buf, nil)))
	log.With("a", 1).InfoContext(ctx, "with context")
	log.Info("without")
	tracing.Logger(log, s.SpanContext()).Info("by logger")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 3 || !strings.Contains(lines[0], "trace_id="+id) || strings.Contains(lines[1], "trace_id") ||
		!strings.Contains(lines[2], "trace_id="+id) {
		t.Errorf("log lines:\n%s", buf.String())
	}

	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "h", Buckets: []float64{1}})
	tracing.Observe(ctx, h, 0.5)
	var m dto.Metric
	if err := h.Write(&m); err != nil {
		t.Fatal(err)
	}
	ex := m.GetHistogram().GetBucket()[0].GetExemplar()
	if ex == nil || ex.GetLabel()[0].GetValue() != id {
		t.Errorf("exemplar %v, want trace %s", ex, id)
	}
}
