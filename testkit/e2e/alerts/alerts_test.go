package alerts_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"ticketrelay/delivery/downstream/webhook/webhooktest"
	"ticketrelay/testkit/e2eproc"
	"ticketrelay/testkit/testwait"
)

// requireEnv makes a missing prometheus binary a failure instead of a skip
// (make test-alerts, which installs it, sets it to 1).
const requireEnv = "TICKETRELAY_PROMETHEUS"

// Paths of the binaries built by TestMain, and of the alert rules.
var frontBin, dispatcherBin, rulesFile, prometheusBin string

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	var err error
	if prometheusBin, err = exec.LookPath("prometheus"); err != nil {
		if os.Getenv(requireEnv) == "1" {
			fmt.Fprintln(os.Stderr, "testkit/e2e/alerts: no prometheus binary, and "+requireEnv+"=1 requires one (testkit/scripts/prometheus-install.sh)")
			return 1
		}
		prometheusBin = "" // the tests skip
		return m.Run()
	}
	root, err := e2eproc.ModuleRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, "testkit/e2e/alerts:", err)
		return 1
	}
	rulesFile = filepath.Join(root, "deploy", "prometheus", "alerts.yml")
	dir, err := os.MkdirTemp("", "ticketrelay-alerts-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "testkit/e2e/alerts:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	if frontBin, dispatcherBin, err = e2eproc.Build(root, dir); err != nil {
		fmt.Fprintln(os.Stderr, "testkit/e2e/alerts:", err)
		return 1
	}
	return m.Run()
}

// TestFirstDeadLetterAfterAStartRaisesItsAlerts runs a dispatcher whose one
// target (a webhook fake) refuses its token, and a Prometheus scraping it
// every 200 ms with the shipped alerts.yml. Once Prometheus has seen the
// dead-letter counter at 0 and evaluated the rules with no alert, one
// ticket fails permanently with a 401: TicketrelayDeadLetters and
// TicketrelayAuthFailures must fire for that target. Before metrics.Init
// and the rules' first-event lines, the series appeared at 1 and
// increase() never saw it.
func TestFirstDeadLetterAfterAStartRaisesItsAlerts(t *testing.T) {
	if prometheusBin == "" {
		t.Skip("no prometheus binary: make test-alerts installs Debian's prometheus package")
	}
	dir := t.TempDir()
	hook := webhooktest.New(t, webhooktest.Options{Token: "the-right-token"})
	cfg := filepath.Join(dir, "ticketrelay.yaml")
	writeFile(t, cfg, "key_namespace: alerts\ntargets:\n"+
		"  - name: ops-hook\n    kind: webhook\n    endpoint: "+fmt.Sprintf("%q", hook.URL())+"\n    timeout: 5s\n"+
		"    options: {token_env: HOOK_TOKEN}\n"+
		"tools:\n  - name: create_in_ops_hook\n    target: ops-hook\n    description: File the ticket in ops-hook.\n")
	db := filepath.Join(dir, "tickets.db")

	// A revoked token: every delivery is refused with 401, a permanent
	// failure that counts a dead letter and an auth failure at once.
	disp := e2eproc.Start(t, dir, "dispatcher", dispatcherBin, []string{
		"-data", dir, "-db", db, "-config", cfg,
		"-nats-listen", "127.0.0.1:0", "-metrics-listen", "127.0.0.1:0",
		"-lease-ttl", "2s", "-poll-interval", "5ms",
	}, []string{"HOOK_TOKEN=revoked-token"}, "nats", "metrics")
	front := e2eproc.Start(t, dir, "mcp-front", frontBin, []string{
		"-db", db, "-config", cfg, "-listen", "127.0.0.1:0", "-metrics-listen", "127.0.0.1:0",
	}, nil, "mcp", "metrics")

	prom := startPrometheus(t, filepath.Join(dir, "prometheus"), map[string]string{
		"ticketrelay-dispatcher": disp.Addr("metrics"),
		"ticketrelay-front":      front.Addr("metrics"),
	})

	// Prometheus has the series at 0 (metrics.Init) before any event...
	deadLetters := `ticketrelay_dead_letters_total{job="ticketrelay-dispatcher",target="ops-hook"}`
	var seenAt float64
	testwait.For(t, 30*time.Second, "Prometheus to scrape "+deadLetters+" at 0", func() bool {
		v, at, ok := prom.instant(t, deadLetters)
		seenAt = at
		return ok && v == 0
	})
	// ... and has evaluated the rules on it without raising anything.
	testwait.For(t, 30*time.Second, "a rule evaluation after the scrape", func() bool {
		return prom.lastEvaluation(t).After(time.Unix(int64(seenAt)+1, 0))
	})
	// (An alert with a "for" may be pending for a moment: the relay lease
	// is taken a little after the start.)
	for _, a := range prom.alerts(t) {
		if n := a.Labels["alertname"]; a.State == "firing" || n == "TicketrelayDeadLetters" || n == "TicketrelayAuthFailures" {
			t.Fatalf("alert %s %s before any event: %+v", n, a.State, a)
		}
	}

	// The first event: one ticket, refused for good.
	cs := e2eproc.Connect(t, "http://"+front.Addr("mcp")+"/mcp")
	began := time.Now()
	var created struct {
		RequestID string `json:"request_id"`
		Status    string `json:"status"`
	}
	e2eproc.CallTool(t, cs, "create_in_ops_hook", map[string]any{
		"request_id": "alerts-first-event-1", "title": "Disk full on db-7", "body": "Writes fail since 03:12.",
	}, &created)
	if created.RequestID != "alerts-first-event-1" {
		t.Fatalf("create answered %+v", created)
	}

	want := map[string]bool{"TicketrelayDeadLetters": false, "TicketrelayAuthFailures": false}
	var last []alert
	if !testwait.Until(60*time.Second, func() bool {
		last = prom.alerts(t)
		for _, a := range last {
			if _, ok := want[a.Labels["alertname"]]; ok && a.State == "firing" &&
				a.Labels["target"] == "ops-hook" && a.Labels["job"] == "ticketrelay-dispatcher" {
				want[a.Labels["alertname"]] = true
			}
		}
		return want["TicketrelayDeadLetters"] && want["TicketrelayAuthFailures"]
	}) {
		m, _ := e2eproc.Scrape(disp.Addr("metrics"))
		t.Fatalf("alerts firing after the first dead letter: %v (last seen %+v); the dispatcher counts dead_letters %v, auth_failures %v",
			want, last, m.Get("ticketrelay_dead_letters_total", "target", "ops-hook"), m.Get("ticketrelay_auth_failures_total", "target", "ops-hook"))
	}
	t.Logf("both alerts fire %s after the create call", time.Since(began).Round(10*time.Millisecond))
	// Prometheus saw the counter go from 0 to 1: the increase, not only
	// the young-process line of the rules, fired.
	if v, _, ok := prom.instant(t, "increase("+deadLetters+"[15m])"); !ok || v <= 0 {
		t.Errorf("increase(%s[15m]) = %v (present: %v), want > 0", deadLetters, v, ok)
	}
	if hook.Count() != 0 {
		t.Errorf("the webhook fake accepted %d deliveries with a revoked token", hook.Count())
	}
	for _, a := range last {
		if n := a.Labels["alertname"]; a.State == "firing" && n != "TicketrelayDeadLetters" && n != "TicketrelayAuthFailures" {
			t.Errorf("alert %s fires too: %+v", n, a)
		}
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// prometheus is a running Prometheus server and its HTTP API.
type prometheus struct {
	base string // http://127.0.0.1:PORT
}

// startPrometheus runs the prometheus binary on a free loopback port with
// its data in dir, scraping each job's one target and evaluating the
// shipped alert rules every 200 ms. It is stopped (SIGINT, then a clean
// exit is required) when the test ends; its log is shown if the test
// failed.
func startPrometheus(t *testing.T, dir string, jobs map[string]string) *prometheus {
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	var scrape strings.Builder
	for job, addr := range jobs {
		fmt.Fprintf(&scrape, "  - job_name: %s\n    static_configs: [{targets: [%q]}]\n", job, addr)
	}
	cfg := filepath.Join(dir, "prometheus.yml")
	writeFile(t, cfg, "global: {scrape_interval: 200ms, scrape_timeout: 200ms, evaluation_interval: 200ms}\n"+
		"rule_files: ["+fmt.Sprintf("%q", rulesFile)+"]\n"+
		"scrape_configs:\n"+scrape.String())
	addr, err := e2eproc.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	p, err := e2eproc.Launch(context.Background(), dir, e2eproc.Spec{
		Name: "prometheus", Bin: prometheusBin, TCPAddr: addr, Dir: dir,
		Args: []string{"--config.file=" + cfg, "--storage.tsdb.path=" + filepath.Join(dir, "data"),
			"--web.listen-address=" + addr, "--log.level=warn"},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Shutdown(); err != nil {
			t.Error(err)
		}
		if t.Failed() {
			e2eproc.DumpLog(t, "prometheus", filepath.Join(dir, "prometheus.log"))
		}
	})
	prom := &prometheus{base: "http://" + addr}
	testwait.For(t, 30*time.Second, "Prometheus to be ready", func() bool {
		resp, err := http.Get(prom.base + "/-/ready")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return prom
}

// get decodes the data of a Prometheus API answer.
func (p *prometheus) get(t *testing.T, path string, data any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	var body struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatalf("GET %s: %s: %v", path, resp.Status, err)
	}
	if body.Status != "success" {
		t.Fatalf("GET %s: %s: %s", path, resp.Status, body.Error)
	}
	if err := json.Unmarshal(body.Data, data); err != nil {
		t.Fatalf("GET %s: data %s: %v", path, body.Data, err)
	}
}

// instant evaluates query now and returns its one sample's value and
// timestamp; ok is false when the answer holds no sample.
func (p *prometheus) instant(t *testing.T, query string) (v, at float64, ok bool) {
	t.Helper()
	var data struct {
		Result []struct {
			Value [2]any `json:"value"`
		} `json:"result"`
	}
	p.get(t, "/api/v1/query?query="+url.QueryEscape(query), &data)
	if len(data.Result) == 0 {
		return 0, 0, false
	}
	if len(data.Result) > 1 {
		t.Fatalf("%s: %d series", query, len(data.Result))
	}
	at, _ = data.Result[0].Value[0].(float64)
	s, _ := data.Result[0].Value[1].(string)
	if _, err := fmt.Sscan(s, &v); err != nil {
		t.Fatalf("%s: value %q: %v", query, s, err)
	}
	return v, at, true
}

// lastEvaluation is the time the alert rules were last evaluated (the
// earliest of their groups).
func (p *prometheus) lastEvaluation(t *testing.T) time.Time {
	t.Helper()
	var data struct {
		Groups []struct {
			File           string    `json:"file"`
			LastEvaluation time.Time `json:"lastEvaluation"`
		} `json:"groups"`
	}
	p.get(t, "/api/v1/rules?type=alert", &data)
	if len(data.Groups) == 0 {
		t.Fatalf("Prometheus loaded no alert rules from %s", rulesFile)
	}
	earliest := data.Groups[0].LastEvaluation
	for _, g := range data.Groups[1:] {
		if g.LastEvaluation.Before(earliest) {
			earliest = g.LastEvaluation
		}
	}
	return earliest
}

// alert is one active alert of /api/v1/alerts.
type alert struct {
	Labels map[string]string `json:"labels"`
	State  string            `json:"state"` // pending or firing
	Value  string            `json:"value"`
}

func (p *prometheus) alerts(t *testing.T) []alert {
	t.Helper()
	var data struct {
		Alerts []alert `json:"alerts"`
	}
	p.get(t, "/api/v1/alerts", &data)
	return data.Alerts
}
