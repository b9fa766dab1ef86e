package traces_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"ticketrelay/testkit/e2eproc"
	"ticketrelay/testkit/testwait"
)

// jaeger is a running Jaeger v2 (an OpenTelemetry Collector build) with
// in-memory storage: its OTLP/HTTP receiver and its query API.
type jaeger struct {
	otlp  string // http://127.0.0.1:port, OTEL_EXPORTER_OTLP_ENDPOINT
	query string // http://127.0.0.1:port
}

// jaegerConfig keeps every listener on loopback at a port chosen at run
// time, stores traces in memory, and turns Jaeger's own telemetry off
// (its metrics listener would take the fixed port 8888).
const jaegerConfig = `service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
    logs:
      level: warn
extensions:
  jaeger_storage:
    backends:
      memstore:
        memory:
          max_traces: 100000
  jaeger_query:
    storage:
      traces: memstore
    http:
      endpoint: %s
    grpc:
      endpoint: %s
receivers:
  otlp:
    protocols:
      http:
        endpoint: %s
exporters:
  jaeger_storage_exporter:
    trace_storage: memstore
`

// startJaeger runs Jaeger for the test. Its ports are found free and then
// given to it: a start that lost one to another process is made again on
// other ports, a few times.
func startJaeger(t *testing.T) *jaeger {
	t.Helper()
	dir := t.TempDir()
	var lastErr error
	for try := range 3 {
		var addrs [3]string
		for i := range addrs {
			a, err := e2eproc.FreeAddr()
			if err != nil {
				t.Fatal(err)
			}
			addrs[i] = a
		}
		query, grpc, otlp := addrs[0], addrs[1], addrs[2]
		cfg := filepath.Join(dir, fmt.Sprintf("jaeger-%d.yaml", try))
		if err := os.WriteFile(cfg, fmt.Appendf(nil, jaegerConfig, query, grpc, otlp), 0o600); err != nil {
			t.Fatal(err)
		}
		name := fmt.Sprintf("jaeger-%d", try)
		p, err := e2eproc.Launch(context.Background(), dir, e2eproc.Spec{
			Name: name, Bin: jaegerBin, Args: []string{"--config", cfg}, TCPAddr: otlp, ServeTimeout: 60 * time.Second,
		})
		if err != nil {
			lastErr = err
			e2eproc.DumpLog(t, name, filepath.Join(dir, name+".log"))
			continue
		}
		t.Cleanup(func() {
			p.ExpectExit()
			if err := p.Shutdown(); err != nil {
				t.Logf("jaeger: %v", err)
			}
		})
		j := &jaeger{otlp: "http://" + otlp, query: "http://" + query}
		testwait.For(t, 60*time.Second, "Jaeger's query API", func() bool {
			resp, err := http.Get(j.query + "/api/services")
			if err != nil {
				return false
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusOK
		})
		return j
	}
	t.Fatalf("jaeger did not start: %v", lastErr)
	return nil
}

// The query API's answer for one trace (Jaeger's JSON model).
type jtrace struct {
	TraceID   string              `json:"traceID"`
	Spans     []jspan             `json:"spans"`
	Processes map[string]jprocess `json:"processes"`
}

type jspan struct {
	TraceID       string `json:"traceID"`
	SpanID        string `json:"spanID"`
	OperationName string `json:"operationName"`
	References    []struct {
		RefType string `json:"refType"`
		TraceID string `json:"traceID"`
		SpanID  string `json:"spanID"`
	} `json:"references"`
	Tags      []jtag `json:"tags"`
	ProcessID string `json:"processID"`
}

type jtag struct {
	Key   string `json:"key"`
	Value any    `json:"value"`
}

type jprocess struct {
	ServiceName string `json:"serviceName"`
	Tags        []jtag `json:"tags"`
}

// tag is span s's tag key as text ("" if it has none).
func (s jspan) tag(key string) string {
	for _, g := range s.Tags {
		if g.Key == key {
			return fmt.Sprint(g.Value)
		}
	}
	return ""
}

// service is the service.name of s's process.
func (tr jtrace) service(s jspan) string { return tr.Processes[s.ProcessID].ServiceName }

// trace reads trace id from Jaeger; found is false while it holds none.
func (j *jaeger) trace(t *testing.T, id string) (jtrace, bool) {
	t.Helper()
	resp, err := http.Get(j.query + "/api/traces/" + id)
	if err != nil {
		t.Fatalf("jaeger query: %v", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("jaeger query: %v", err)
	}
	if resp.StatusCode == http.StatusNotFound {
		return jtrace{}, false
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("jaeger query %s: %s: %s", id, resp.Status, body)
	}
	var out struct {
		Data []jtrace `json:"data"`
	}
	if err := json.Unmarshal(body, &out); err != nil {
		t.Fatalf("jaeger query %s: %v: %s", id, err, body)
	}
	if len(out.Data) == 0 {
		return jtrace{}, false
	}
	return out.Data[0], true
}

// waitTrace waits until Jaeger holds trace id with spans that satisfy
// done, and returns it; the last one read is shown if it never does.
func (j *jaeger) waitTrace(t *testing.T, id, what string, done func(jtrace) bool) jtrace {
	t.Helper()
	var last jtrace
	if !testwait.Until(60*time.Second, func() bool {
		tr, ok := j.trace(t, id)
		last = tr
		return ok && done(tr)
	}) {
		t.Fatalf("trace %s never had %s; last read:\n%s", id, what, describe(last))
	}
	return last
}

// describe lists a trace's spans, one a line, for a failure message.
func describe(tr jtrace) string {
	var b strings.Builder
	for _, s := range tr.Spans {
		fmt.Fprintf(&b, "  %s %s/%s refs=%v tags=%v\n", tr.service(s), s.OperationName, s.SpanID, s.References, s.Tags)
	}
	return b.String()
}
