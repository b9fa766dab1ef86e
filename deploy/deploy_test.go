// Package deploy holds the operations files (dashboard, alert rules,
// systemd units, nats-server config); its test keeps them true to the code.
package deploy

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.yaml.in/yaml/v3"

	"ticketrelay/front/mcpauth"
	"ticketrelay/internal/app"
	"ticketrelay/internal/app/dispatcher"
	"ticketrelay/internal/app/front"
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
	metrics.NewCluster(r)                 // multi-host dispatchers only
	metrics.NewOAuth(r, mcpauth.Outcomes) // mcp-front with -oauth-issuer only
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

// alertRule is one rule of alerts.yml.
type alertRule struct {
	Alert       string            `yaml:"alert"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

// alertRules reads the rules of alerts.yml, refusing keys a rule group
// does not have.
func alertRules(t *testing.T) []alertRule {
	t.Helper()
	b, err := os.ReadFile("prometheus/alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Groups []struct {
			Name  string      `yaml:"name"`
			Rules []alertRule `yaml:"rules"`
		} `yaml:"groups"`
	}
	dec := yaml.NewDecoder(strings.NewReader(string(b)))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		t.Fatalf("alerts.yml does not parse as Prometheus rule groups: %v", err)
	}
	var rules []alertRule
	for _, g := range f.Groups {
		rules = append(rules, g.Rules...)
	}
	return rules
}

func TestAlertRulesNameExportedMetrics(t *testing.T) {
	known := exported(t)
	alerts := map[string]bool{}
	for _, r := range alertRules(t) {
		if r.Alert == "" || r.Expr == "" || r.Annotations["summary"] == "" {
			t.Errorf("rule %+v lacks alert name, expr or summary", r)
		}
		if checkExpr(t, "alert "+r.Alert, r.Expr, known) == 0 {
			t.Errorf("alert %s names no metric", r.Alert)
		}
		alerts[r.Alert] = true
	}
	// The operations issue asks for these rules by name.
	for _, want := range []string{"TicketrelayOutboxBacklogOld", "TicketrelayDeadLetters", "TicketrelayUncertainRequests",
		"TicketrelayAuthFailures", "TicketrelayScrapeDown",
		// Issue 19, for operators: lost quorum, a lagging replica, the
		// bucket near its limit, a host lost.
		"TicketrelayClusterNoQuorum", "TicketrelayClusterReplicaLagging", "TicketrelayClusterBucketNearFull",
		"TicketrelayClusterHostLost"} {
		if !alerts[want] {
			t.Errorf("alerts.yml has no rule %s", want)
		}
	}
}

// promtoolFile is a `promtool test rules` file (the fields read here).
type promtoolFile struct {
	RuleFiles []string `yaml:"rule_files"`
	Tests     []struct {
		Name        string `yaml:"name"`
		InputSeries []struct {
			Series string `yaml:"series"`
			Values string `yaml:"values"`
		} `yaml:"input_series"`
		AlertRuleTests []struct {
			EvalTime  string           `yaml:"eval_time"`
			Alertname string           `yaml:"alertname"`
			ExpAlerts []map[string]any `yaml:"exp_alerts"`
		} `yaml:"alert_rule_test"`
	} `yaml:"tests"`
}

// countedIn finds the counter an alert counts events of (increase or rate).
var countedIn = regexp.MustCompile(`\b(?:increase|rate)\((ticketrelay_[a-z0-9_]+_total)\b`)

var leadingNumber = regexp.MustCompile(`^-?[0-9.]+(?:e[-+]?[0-9]+)?`)

// startsAtAnEvent reports whether a promtool series notation ("_x9 1x80",
// "0+1x40") has a first sample other than 0: a counter series that starts
// at the first event, as one does when the event came before the first
// scrape, or on a label value seen for the first time.
func startsAtAnEvent(values string) bool {
	for _, tok := range strings.Fields(values) {
		if strings.HasPrefix(tok, "_") || tok == "stale" {
			continue
		}
		v, err := strconv.ParseFloat(leadingNumber.FindString(tok), 64)
		return err == nil && v != 0
	}
	return false
}

// TestEveryAlertHasPromtoolTests keeps alerts_test*.yml (run by make
// test-alerts) covering alerts.yml: every alert has a case where it fires
// and one where it stays silent, and an alert on a counter fires in a case
// where that counter's series starts at the first event (the case that
// increase() alone never saw). A new alert without tests fails here.
func TestEveryAlertHasPromtoolTests(t *testing.T) {
	files, err := filepath.Glob("prometheus/alerts_test*.yml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no prometheus/alerts_test*.yml (%v)", err)
	}
	fires, silent := map[string]int{}, map[string]int{}
	firesFromFirstEvent := map[string]bool{} // "alert counter"
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		var f promtoolFile
		if err := yaml.Unmarshal(b, &f); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !slices.Contains(f.RuleFiles, "alerts.yml") {
			t.Errorf("%s: rule_files %v does not load alerts.yml", name, f.RuleFiles)
		}
		for _, g := range f.Tests {
			firstEvent := map[string]bool{} // counters with a series starting at an event
			for _, in := range g.InputSeries {
				metric, _, _ := strings.Cut(in.Series, "{")
				if startsAtAnEvent(in.Values) {
					firstEvent[strings.TrimSpace(metric)] = true
				}
			}
			for _, c := range g.AlertRuleTests {
				if len(c.ExpAlerts) == 0 {
					silent[c.Alertname]++
					continue
				}
				fires[c.Alertname]++
				for counter := range firstEvent {
					firesFromFirstEvent[c.Alertname+" "+counter] = true
				}
			}
		}
	}
	rules := alertRules(t)
	if len(rules) < 12 {
		t.Fatalf("alerts.yml has %d rules", len(rules))
	}
	for _, r := range rules {
		if fires[r.Alert] == 0 {
			t.Errorf("alert %s has no promtool case in which it fires (alerts_test*.yml)", r.Alert)
		}
		if silent[r.Alert] == 0 {
			t.Errorf("alert %s has no promtool case in which it stays silent (exp_alerts: [])", r.Alert)
		}
		for _, m := range countedIn.FindAllStringSubmatch(r.Expr, -1) {
			if !firesFromFirstEvent[r.Alert+" "+m[1]] {
				t.Errorf("alert %s counts %s, but no promtool case has it fire with a %s series that starts at the first event", r.Alert, m[1], m[1])
			}
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

// TestMultiHostDropIns keeps deploy/multihost/ true to the processes:
// both drop-ins replace ExecStart with the multi-host flags, every flag
// they pass is one the process has (its -help), every variable they use
// is set in cluster.env, and the README points at the cluster's
// configuration.
func TestMultiHostDropIns(t *testing.T) {
	envFile, err := os.ReadFile("multihost/cluster.env")
	if err != nil {
		t.Fatal(err)
	}
	defined := map[string]bool{}
	for _, line := range strings.Split(string(envFile), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(line, "#") && v != "" {
			defined[k] = true
		}
	}
	helpOf := map[string]func(context.Context, app.Env) error{"dispatcher": dispatcher.Run, "mcp-front": front.Run}
	for unit, bin := range map[string]string{
		"multihost/ticketrelay-dispatcher.service.d/multihost.conf": "dispatcher",
		"multihost/ticketrelay-front.service.d/multihost.conf":      "mcp-front",
	} {
		b, err := os.ReadFile(unit)
		if err != nil {
			t.Fatal(err)
		}
		text := strings.ReplaceAll(string(b), "\\\n", " ")
		if !regexp.MustCompile(`(?m)^ExecStart=$`).MatchString(text) || !strings.Contains(text, "EnvironmentFile=/etc/ticketrelay/cluster.env") {
			t.Errorf("%s: must reset ExecStart and read /etc/ticketrelay/cluster.env", unit)
		}
		for _, f := range []string{"-multi-host ", "-nats ${NATS_URLS} ", "-installation ${INSTALLATION}"} {
			if !strings.Contains(text, f) {
				t.Errorf("%s does not pass %s", unit, f)
			}
		}
		for _, m := range regexp.MustCompile(`\$\{([A-Z_]+)\}`).FindAllStringSubmatch(text, -1) {
			if !defined[m[1]] {
				t.Errorf("%s uses ${%s}, which cluster.env does not set", unit, m[1])
			}
		}
		var help strings.Builder
		helpOf[bin](context.Background(), app.Env{Args: []string{"-help"}, Stdin: strings.NewReader(""), Stdout: &help, Stderr: &help,
			Lookup: func(string) (string, bool) { return "", false }})
		exec := regexp.MustCompile(`(?m)^ExecStart=/\S+ (.*)$`).FindStringSubmatch(text)
		if exec == nil {
			t.Fatalf("%s has no ExecStart command", unit)
		}
		for _, f := range regexp.MustCompile(`(?:^|\s)(-[a-z-]+)`).FindAllStringSubmatch(exec[1], -1) {
			if !strings.Contains(help.String(), "  "+f[1]+" ") && !strings.Contains(help.String(), "  "+f[1]+"\n") {
				t.Errorf("%s passes %s, which %s -help does not list", unit, f[1], bin)
			}
		}
	}
	readme, err := os.ReadFile("multihost/README.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(readme), "../nats/cluster/") {
		t.Error("multihost/README.md does not point at the NATS cluster's configuration (../nats/cluster/)")
	}
}
