// Package tracing is ticketrelay's OpenTelemetry tracing: set up from the
// standard OTEL_* environment variables (Start), off unless they ask for
// it, and the spans of a ticket's path, from the agent's tool call through
// the ledger commit, the relay's publish and each forwarder attempt to the
// downstream's HTTP answer (spans.go). The trace context crosses the
// process boundary with the ticket: stored beside the outbox row and sent
// as the NATS message's traceparent header (propagate.go).
//
// Off, every function here returns after one atomic load: the tracer is
// OpenTelemetry's noop, nothing is exported, and the callers skip the work
// of naming attributes (Enabled).
package tracing

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"ticketrelay/internal/loggate"
)

// Scope is the instrumentation scope of every span ticketrelay makes.
const Scope = "ticketrelay"

var (
	enabled atomic.Bool
	tracer  atomic.Pointer[tracerBox]
	host    atomic.Pointer[string]
)

type tracerBox struct{ t trace.Tracer }

// Enabled reports whether spans are recorded and exported in this process.
func Enabled() bool { return builtIn && enabled.Load() }

func tr() trace.Tracer {
	if b := tracer.Load(); b != nil {
		return b.t
	}
	return noop.Tracer{}
}

// Use turns tracing on with tp, its spans naming hostName, instead of the
// exporter the OTEL_* variables configure: for tests that read spans back
// from an in-memory exporter (tracingtest). It returns what turns tracing
// off again; tp's shutdown stays the caller's.
func Use(tp *sdktrace.TracerProvider, hostName string) (off func()) {
	tracer.Store(&tracerBox{t: tp.Tracer(Scope)})
	host.Store(&hostName)
	enabled.Store(true)
	return func() {
		enabled.Store(false)
		tracer.Store(nil)
		host.Store(nil)
	}
}

// hostName is the host.name of this process's resource: every span of the
// multi-host steps names it too, so that a trace read outside its resource
// (a span list) still says which host did what.
func hostName() string {
	if h := host.Load(); h != nil {
		return *h
	}
	return ""
}

// Config is what the OTEL_* variables ask for.
type Config struct {
	Endpoint string // the OTLP/HTTP traces URL (…/v1/traces)
	Sampler  sdktrace.Sampler
	Service  string
	Attrs    []attribute.KeyValue // OTEL_RESOURCE_ATTRIBUTES
}

// ErrConfig marks a refused OTEL_* value.
var ErrConfig = errors.New("tracing")

// FromEnv reads the standard variables through lookup. ok is false when
// tracing stays off: no OTLP endpoint given, OTEL_TRACES_EXPORTER=none or
// OTEL_SDK_DISABLED=true. service is the default service.name
// (OTEL_SERVICE_NAME, or service.name in OTEL_RESOURCE_ATTRIBUTES, win).
func FromEnv(lookup func(string) (string, bool), service string) (c Config, ok bool, err error) {
	get := func(k string) string { v, _ := lookup(k); return strings.TrimSpace(v) }
	if strings.EqualFold(get("OTEL_SDK_DISABLED"), "true") {
		return Config{}, false, nil
	}
	switch exp := get("OTEL_TRACES_EXPORTER"); exp {
	case "none":
		return Config{}, false, nil
	case "", "otlp":
	default:
		return Config{}, false, fmt.Errorf("%w: OTEL_TRACES_EXPORTER=%q: ticketrelay exports with otlp (over HTTP) or none", ErrConfig, exp)
	}
	for _, k := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		if p := get(k); p != "" {
			if p != "http/protobuf" {
				return Config{}, false, fmt.Errorf("%w: %s=%q: ticketrelay exports OTLP over HTTP (http/protobuf) only", ErrConfig, k, p)
			}
			break
		}
	}
	switch {
	case get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "":
		// The signal's own endpoint is used as given.
		c.Endpoint = get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
	case get("OTEL_EXPORTER_OTLP_ENDPOINT") != "":
		c.Endpoint = strings.TrimSuffix(get("OTEL_EXPORTER_OTLP_ENDPOINT"), "/") + "/v1/traces"
	case get("OTEL_TRACES_EXPORTER") == "otlp":
		c.Endpoint = "http://localhost:4318/v1/traces" // the specification's default
	default:
		return Config{}, false, nil // nothing asked for tracing
	}
	if u, err := url.Parse(c.Endpoint); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return Config{}, false, fmt.Errorf("%w: OTLP endpoint %q: want an http:// or https:// URL", ErrConfig, c.Endpoint)
	}
	if c.Sampler, err = sampler(get("OTEL_TRACES_SAMPLER"), get("OTEL_TRACES_SAMPLER_ARG")); err != nil {
		return Config{}, false, err
	}
	c.Service = service
	if ra := get("OTEL_RESOURCE_ATTRIBUTES"); ra != "" {
		for _, kv := range strings.Split(ra, ",") {
			k, v, found := strings.Cut(kv, "=")
			k = strings.TrimSpace(k)
			if !found || k == "" {
				return Config{}, false, fmt.Errorf("%w: OTEL_RESOURCE_ATTRIBUTES: %q is not key=value", ErrConfig, kv)
			}
			if v, err = url.PathUnescape(strings.TrimSpace(v)); err != nil {
				return Config{}, false, fmt.Errorf("%w: OTEL_RESOURCE_ATTRIBUTES: %q: %v", ErrConfig, kv, err)
			}
			if k == string(semconv.ServiceNameKey) {
				c.Service = v
				continue
			}
			c.Attrs = append(c.Attrs, attribute.String(k, v))
		}
	}
	if s := get("OTEL_SERVICE_NAME"); s != "" {
		c.Service = s
	}
	return c, true, nil
}

// sampler is the sampler OTEL_TRACES_SAMPLER names; the default is the
// specification's, parentbased_always_on: a caller that sampled its trace
// decides for ours.
func sampler(name, arg string) (sdktrace.Sampler, error) {
	ratio := func() (float64, error) {
		if arg == "" {
			return 1, nil
		}
		r, err := strconv.ParseFloat(arg, 64)
		if err != nil || r < 0 || r > 1 {
			return 0, fmt.Errorf("%w: OTEL_TRACES_SAMPLER_ARG=%q: want a ratio from 0 to 1", ErrConfig, arg)
		}
		return r, nil
	}
	switch name {
	case "", "parentbased_always_on":
		return sdktrace.ParentBased(sdktrace.AlwaysSample()), nil
	case "always_on":
		return sdktrace.AlwaysSample(), nil
	case "always_off":
		return sdktrace.NeverSample(), nil
	case "parentbased_always_off":
		return sdktrace.ParentBased(sdktrace.NeverSample()), nil
	case "traceidratio", "parentbased_traceidratio":
		r, err := ratio()
		if err != nil {
			return nil, err
		}
		if name == "traceidratio" {
			return sdktrace.TraceIDRatioBased(r), nil
		}
		return sdktrace.ParentBased(sdktrace.TraceIDRatioBased(r)), nil
	}
	return nil, fmt.Errorf("%w: OTEL_TRACES_SAMPLER=%q: want always_on, always_off, traceidratio or their parentbased_ forms", ErrConfig, name)
}

// Start sets up tracing for the process named service from the OTEL_*
// variables lookup reads, and returns what flushes and stops it at exit
// (call it with a context bounding the flush). Off, it changes nothing and
// its stop does nothing. One process starts it once.
func Start(ctx context.Context, service string, lookup func(string) (string, bool), log *slog.Logger) (stop func(context.Context) error, err error) {
	c, ok, err := FromEnv(lookup, service)
	if err != nil || !ok {
		return func(context.Context) error { return nil }, err
	}
	if !builtIn {
		log.Warn("tracing asked for, but this build has it compiled out (tag ticketrelay_notracing)", "endpoint", c.Endpoint)
		return func(context.Context) error { return nil }, nil
	}
	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(c.Endpoint))
	if err != nil {
		return nil, fmt.Errorf("tracing: OTLP exporter: %w", err)
	}
	name, _ := os.Hostname()
	attrs := append([]attribute.KeyValue{semconv.ServiceName(c.Service), semconv.HostName(name)}, c.Attrs...)
	res := resource.NewWithAttributes(semconv.SchemaURL, attrs...)
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp, sdktrace.WithBatchTimeout(time.Second)),
		sdktrace.WithSampler(c.Sampler),
		sdktrace.WithResource(res),
	)
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagator)
	// A collector that is down fails every export: one line a minute.
	gate := loggate.New(loggate.Every, 1, time.Now)
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		if ok, held := gate.Pass("export"); ok {
			log.Warn("tracing: export failed", "err", err, "held_back", held)
		}
	}))
	tracer.Store(&tracerBox{t: tp.Tracer(Scope)})
	for _, kv := range attrs {
		if kv.Key == semconv.HostNameKey {
			h := kv.Value.AsString()
			host.Store(&h)
		}
	}
	enabled.Store(true)
	log.Info("tracing on", "endpoint", c.Endpoint, "service", c.Service, "sampler", c.Sampler.Description())
	return func(ctx context.Context) error {
		enabled.Store(false)
		tracer.Store(nil)
		if err := tp.Shutdown(ctx); err != nil {
			return fmt.Errorf("tracing: flush at exit: %w", err)
		}
		return nil
	}, nil
}
