package torture

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"ticketrelay/delivery/downstream/downstreamtest"
	"ticketrelay/delivery/downstream/github/githubtest"
	"ticketrelay/delivery/downstream/jira/jiratest"
	"ticketrelay/delivery/downstream/pagerduty/pagerdutytest"
	"ticketrelay/delivery/downstream/slack/slacktest"
	"ticketrelay/delivery/downstream/webhook/webhooktest"
	"ticketrelay/delivery/downstream/zendesk/zendesktest"
	"ticketrelay/delivery/targets"
)

// Kinds are the target kinds of a run, one target and one tool each.
var Kinds = []string{"webhook", "zendesk", "pagerduty", "github", "jira", "slack"}

// ToolFor is the create tool bound to the target of kind.
func ToolFor(kind string) string { return "ticket_" + kind }

// Credentials the fakes accept; the dispatcher reads them from its
// environment, as the config file names them.
const (
	fakeEmail      = "relay@torture.example"
	fakeToken      = "torture-token-0123456789abcdef"
	fakeRoutingKey = "R0UT1NGKEY0123456789ABCDEFGHIJKL" // 32 characters
	fakeProject    = "TRT"
)

var fakeSigningSecret = "whsec_" + base64.StdEncoding.EncodeToString([]byte("torture-signing-secret-32-bytes!"))

// fakeTB lets the httptest fakes, written for tests, run in a program: it
// keeps their cleanups and turns a fatal error into a panic that
// startFakes recovers. Methods the fakes do not call are not provided.
type fakeTB struct {
	testing.TB
	mu       sync.Mutex
	cleanups []func()
}

type fakeFatal struct{ msg string }

func (t *fakeTB) Helper()                        {}
func (t *fakeTB) Name() string                   { return "torture" }
func (t *fakeTB) Logf(string, ...any)            {}
func (t *fakeTB) Fatalf(format string, a ...any) { panic(fakeFatal{fmt.Sprintf(format, a...)}) }
func (t *fakeTB) Fatal(a ...any)                 { panic(fakeFatal{fmt.Sprint(a...)}) }
func (t *fakeTB) Errorf(format string, a ...any) { panic(fakeFatal{fmt.Sprintf(format, a...)}) }
func (t *fakeTB) Cleanup(f func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.cleanups = append(t.cleanups, f)
}

// close runs the cleanups, last first.
func (t *fakeTB) close() {
	t.mu.Lock()
	cs := t.cleanups
	t.cleanups = nil
	t.mu.Unlock()
	for i := len(cs) - 1; i >= 0; i-- {
		cs[i]()
	}
}

// fakes are the six third-party APIs of a run.
type fakes struct {
	tb        *fakeTB
	webhook   *webhooktest.Fake
	zendesk   *zendesktest.Fake
	pagerduty *pagerdutytest.Fake
	github    *githubtest.Fake
	jira      *jiratest.Fake
	slack     *slacktest.Fake
}

func startFakes() (f *fakes, err error) {
	tb := &fakeTB{}
	defer func() {
		if r := recover(); r != nil {
			ff, ok := r.(fakeFatal)
			if !ok {
				panic(r)
			}
			tb.close()
			f, err = nil, fmt.Errorf("torture: start fakes: %s", ff.msg)
		}
	}()
	f = &fakes{
		tb:        tb,
		webhook:   webhooktest.New(tb, webhooktest.Options{Token: fakeToken, SigningSecret: fakeSigningSecret}),
		zendesk:   zendesktest.New(tb, fakeEmail, fakeToken, nil),
		pagerduty: pagerdutytest.New(tb, fakeRoutingKey),
		github:    githubtest.New(tb, "torture", "tickets", fakeToken),
		jira:      jiratest.New(tb, fakeEmail, fakeToken, fakeProject, 2*time.Second, nil),
		slack:     slacktest.New(tb),
	}
	for _, k := range Kinds {
		f.faults(k).SetRetryAfter(time.Second)
	}
	return f, nil
}

func (f *fakes) close() { f.tb.close() }

// faults are the fault queue of the fake of kind.
func (f *fakes) faults(kind string) *downstreamtest.Faults {
	switch kind {
	case "webhook":
		return &f.webhook.Faults
	case "zendesk":
		return &f.zendesk.Faults
	case "pagerduty":
		return &f.pagerduty.Faults
	case "github":
		return &f.github.Faults
	case "jira":
		return &f.jira.Faults
	case "slack":
		return &f.slack.Faults
	}
	panic("torture: unknown kind " + kind)
}

// env is what the dispatcher needs in its environment: the secrets the
// config file names.
func (f *fakes) env() []string {
	return []string{
		"TRT_WEBHOOK_SECRET=" + fakeSigningSecret,
		"TRT_TOKEN=" + fakeToken,
		"TRT_ROUTING_KEY=" + fakeRoutingKey,
		"TRT_SLACK_URL=" + f.slack.URL(),
	}
}

// configYAML binds one tool to one target of each kind, all on the fakes.
func (f *fakes) configYAML() string {
	var b strings.Builder
	b.WriteString("key_namespace: torture\ntargets:\n")
	fmt.Fprintf(&b, "  - {name: webhook, kind: webhook, endpoint: %q, timeout: 2s, options: {signing_secret_env: TRT_WEBHOOK_SECRET, token_env: TRT_TOKEN}}\n", f.webhook.URL())
	fmt.Fprintf(&b, "  - {name: zendesk, kind: zendesk, endpoint: %q, timeout: 2s, options: {email: %q, token_env: TRT_TOKEN}}\n", f.zendesk.URL(), fakeEmail)
	fmt.Fprintf(&b, "  - {name: pagerduty, kind: pagerduty, endpoint: %q, timeout: 2s, options: {routing_key_env: TRT_ROUTING_KEY, source: torture}}\n", f.pagerduty.URL())
	fmt.Fprintf(&b, "  - {name: github, kind: github, endpoint: %q, timeout: 2s, options: {owner: torture, repo: tickets, token_env: TRT_TOKEN}}\n", f.github.URL())
	fmt.Fprintf(&b, "  - {name: jira, kind: jira, endpoint: %q, timeout: 2s, options: {email: %q, token_env: TRT_TOKEN, project: %s}}\n", f.jira.URL(), fakeEmail, fakeProject)
	b.WriteString("  - {name: slack, kind: slack, timeout: 2s, options: {webhook_url_env: TRT_SLACK_URL}}\n")
	b.WriteString("tools:\n")
	for _, k := range Kinds {
		fmt.Fprintf(&b, "  - {name: %s, target: %s, description: \"Torture target %s.\"}\n", ToolFor(k), k, k)
	}
	return b.String()
}

// Record is one item a fake holds: what a downstream actually received.
type Record struct {
	Target     string `json:"target"`
	Kind       string `json:"kind"`
	RequestID  string `json:"request_id"`  // parsed from the title ("" if none)
	ExternalID string `json:"external_id"` // the id the API gave it ("" for Slack)
	// Applied counts the create calls that landed on this item (PagerDuty
	// applies a trigger with an open alert's dedup_key to that alert).
	Applied int    `json:"applied,omitempty"`
	Title   string `json:"title"`
}

// ridRE finds a harness request id in a title or message.
var ridRE = regexp.MustCompile(`trq-[0-9a-f]+-c\d+-r\d+`)

func ridIn(s string) string { return ridRE.FindString(s) }

// records lists what every fake holds.
func (f *fakes) records() []Record {
	var out []Record
	add := func(kind, title, ext string, applied int) {
		out = append(out, Record{Target: kind, Kind: kind, RequestID: ridIn(title), ExternalID: ext, Applied: applied, Title: title})
	}
	for _, d := range f.webhook.Deliveries() {
		var p struct {
			Data struct {
				Title string `json:"title"`
			} `json:"data"`
		}
		_ = json.Unmarshal(d.Body, &p)
		add("webhook", p.Data.Title, d.ID, 1)
	}
	for _, t := range f.zendesk.Tickets() {
		add("zendesk", t.Subject, strconv.FormatInt(t.ID, 10), 1)
	}
	for _, a := range f.pagerduty.Alerts() {
		add("pagerduty", a.Summary, a.DedupKey, a.Events)
	}
	for _, is := range f.github.Issues() {
		add("github", is.Title, strconv.FormatInt(is.Number, 10), 1)
	}
	for _, is := range f.jira.Issues() {
		add("jira", is.Summary, is.Key, 1)
	}
	for _, m := range f.slack.Messages() {
		add("slack", m, "", 1)
	}
	return out
}

// keyed reports whether kind takes a dedupe key, as the adapter declares.
func keyed(kind string) bool {
	c, err := targets.CapabilitiesOf(targets.Def{Name: kind, Kind: kind})
	return err == nil && c.DedupeKey
}
