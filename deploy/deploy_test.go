// Package deploy holds the operations files (dashboard, alert rules,
// systemd units, nats-server config); its test keeps them true to the code.
package deploy

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.yaml.in/yaml/v3"

	"ticketrelay/metrics"
)

// recorder is a Registerer that remembers the names of what is registered.
type recorder struct{ names map[string]bool }

var fqName = regexp.MustCompile(`fqName: "([^"]+)"`)

func (r *recorder) Register(c prometheus.Collector) error {
	ch := make(chan *prometheus.Desc, 64)
	go func() { c.Describe(ch); close(ch) }()
	for d := range ch {
		m := fqName.FindStringSubmatch(d.String())
		if m == nil {
			continue
		}
		for _, suffix := range []string{"", "_bucket", "_sum", "_count"} {
			r.names[m[1]+suffix] = true
		}
	}
	return nil
}

func (r *recorder) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		r.Register(c)
	}
}

func (r *recorder) Unregister(prometheus.Collector) bool { return false }

// exported lists every metric name the two processes serve, as the
// processes build them (internal/app registers the Go and process
// collectors beside ours), plus Prometheus' own "up".
func exported(t *testing.T) map[string]bool {
	r := &recorder{names: map[string]bool{"up": true}}
	metrics.NewFront(r)
	metrics.NewDispatcher(r)
	r.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if !r.names["ticketrelay_dispatched_total"] || !r.names["ticketrelay_tool_call_duration_seconds_bucket"] {
		t.Fatalf("recorder saw no ticketrelay metrics: %d names", len(r.names))
	}
	return r.names
}

var metricRef = regexp.MustCompile(`\b(?:ticketrelay|process|go)_[a-zA-Z0-9_]+|\bup\b`)

func checkExpr(t *testing.T, where, expr string, known map[string]bool) int {
	t.Helper()
	refs := metricRef.FindAllString(expr, -1)
	for _, name := range refs {
		if !known[name] {
			t.Errorf("%s: %q names metric %s, which ticketrelay does not export", where, expr, name)
		}
	}
	return len(refs)
}

func TestAlertRulesNameExportedMetrics(t *testing.T) {
	known := exported(t)
	b, err := os.ReadFile("prometheus/alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Groups []struct {
			Name  string `yaml:"name"`
			Rules []struct {
				Alert       string            `yaml:"alert"`
				Expr        string            `yaml:"expr"`
				For         string            `yaml:"for"`
				Labels      map[string]string `yaml:"labels"`
				Annotations map[string]string `yaml:"annotations"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	dec := yaml.NewDecoder(strings.NewReader(string(b)))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		t.Fatalf("alerts.yml does not parse as Prometheus rule groups: %v", err)
	}
	alerts := map[string]bool{}
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" || r.Expr == "" || r.Annotations["summary"] == "" {
				t.Errorf("rule %+v lacks alert name, expr or summary", r)
			}
			if checkExpr(t, "alert "+r.Alert, r.Expr, known) == 0 {
				t.Errorf("alert %s names no metric", r.Alert)
			}
			alerts[r.Alert] = true
		}
	}
	// The operations issue asks for these rules by name.
	for _, want := range []string{"TicketrelayOutboxBacklogOld", "TicketrelayDeadLetters", "TicketrelayUncertainRequests",
		"TicketrelayAuthFailures", "TicketrelayScrapeDown"} {
		if !alerts[want] {
			t.Errorf("alerts.yml has no rule %s", want)
		}
	}
}

func TestDashboardNamesExportedMetrics(t *testing.T) {
	known := exported(t)
	b, err := os.ReadFile("grafana/ticketrelay.json")
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Title  string `json:"title"`
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("dashboard is not JSON: %v", err)
	}
	if d.Title == "" || len(d.Panels) < 8 {
		t.Fatalf("dashboard %q has %d panels", d.Title, len(d.Panels))
	}
	used := map[string]bool{}
	for _, p := range d.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, q := range p.Targets {
			checkExpr(t, "panel "+p.Title, q.Expr, known)
			for _, n := range metricRef.FindAllString(q.Expr, -1) {
				used[n] = true
			}
		}
	}
	// Every operational signal the design names is on the dashboard.
	for _, want := range []string{"ticketrelay_replays_total", "ticketrelay_outbox_backlog", "ticketrelay_dispatched_total",
		"ticketrelay_jetstream_duplicate_acks_total", "ticketrelay_deliveries_total", "ticketrelay_dead_letters_total",
		"ticketrelay_uncertain_requests_total", "ticketrelay_commit_to_ack_seconds_bucket"} {
		if !used[want] {
			t.Errorf("dashboard does not show %s", want)
		}
	}
}

func TestNATSConfigSyncsEveryWrite(t *testing.T) {
	b, err := os.ReadFile("nats/nats-server.conf")
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^\s*sync_interval:\s*always\s*$`).Match(b) {
		t.Fatal("nats-server.conf must set sync_interval: always (acknowledged tickets must survive a power cut)")
	}
}

func TestSystemdUnitsUseDocumentedFlags(t *testing.T) {
	for unit, flags := range map[string][]string{
		"systemd/ticketrelay-front.service":      {"-db ", "-listen ", "-metrics-listen ", "-config "},
		"systemd/ticketrelay-dispatcher.service": {"-data ", "-nats-listen ", "-metrics-listen ", "-config "},
	} {
		b, err := os.ReadFile(unit)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range flags {
			if !strings.Contains(string(b), f) {
				t.Errorf("%s does not pass %s", unit, f)
			}
		}
		if !strings.Contains(string(b), "KillSignal=SIGTERM") {
			t.Errorf("%s must stop the process with SIGTERM (clean shutdown)", unit)
		}
	}
}
