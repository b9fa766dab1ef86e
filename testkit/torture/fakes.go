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
	// slackThread is a message of the Slack channel ticketrelay did not
	// post (CHANNEL/TS): the load comments in its thread.
	slackThread string
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
		pagerduty: pagerdutytest.New(tb, fakeRoutingKey, pagerdutytest.Options{APIToken: fakeToken}),
		github:    githubtest.New(tb, "torture", "tickets", fakeToken),
		jira:      jiratest.New(tb, fakeEmail, fakeToken, fakeProject, 2*time.Second, nil),
		slack:     slacktest.New(tb),
	}
	for _, q := range f.queues() {
		q.Faults.SetRetryAfter(time.Second)
	}
	f.slackThread = slackThreadOf(f.slack.AddParent(slackParentText))
	return f, nil
}

func (f *fakes) close() { f.tb.close() }

// queue is one fault queue of a fake: its creates', or its comments'.
type queue struct {
	Name   string
	Faults *downstreamtest.Faults
}

// queues are the fakes' fault queues: each kind's creates, and the
// comments of those whose comments have a queue of their own (Zendesk's
// covers its updates too; the webhook's comments and updates are posts to
// the create's URL).
func (f *fakes) queues() []queue {
	return []queue{
		{"webhook", &f.webhook.Faults}, {"zendesk", &f.zendesk.Faults}, {"pagerduty", &f.pagerduty.Faults},
		{"github", &f.github.Faults}, {"jira", &f.jira.Faults}, {"slack", &f.slack.Faults},
		{"zendesk-comments", &f.zendesk.CommentFaults}, {"pagerduty-notes", &f.pagerduty.NoteFaults},
		{"github-comments", &f.github.CommentFaults}, {"jira-comments", &f.jira.CommentFaults}, {"slack-replies", &f.slack.ReplyFaults},
	}
}

// env is what the dispatcher needs in its environment: the secrets the
// config file names.
func (f *fakes) env() []string {
	return []string{
		"TRT_WEBHOOK_SECRET=" + fakeSigningSecret,
		"TRT_TOKEN=" + fakeToken,
		"TRT_ROUTING_KEY=" + fakeRoutingKey,
		"TRT_SLACK_URL=" + f.slack.URL(),
		"TRT_SLACK_BOT=" + slacktest.BotToken,
	}
}

// configYAML binds one tool to one target of each kind, all on the fakes.
func (f *fakes) configYAML() string {
	var b strings.Builder
	b.WriteString("key_namespace: torture\ntargets:\n")
	fmt.Fprintf(&b, "  - {name: webhook, kind: webhook, endpoint: %q, timeout: 2s, options: {signing_secret_env: TRT_WEBHOOK_SECRET, token_env: TRT_TOKEN}}\n", f.webhook.URL())
	fmt.Fprintf(&b, "  - {name: zendesk, kind: zendesk, endpoint: %q, timeout: 2s, options: {email: %q, token_env: TRT_TOKEN}}\n", f.zendesk.URL(), fakeEmail)
	fmt.Fprintf(&b, "  - {name: pagerduty, kind: pagerduty, endpoint: %q, timeout: 2s, options: {routing_key_env: TRT_ROUTING_KEY, source: torture, "+
		"api_token_env: TRT_TOKEN, api_endpoint: %q, from: %q}}\n", f.pagerduty.URL(), f.pagerduty.APIURL(), fakeFrom)
	fmt.Fprintf(&b, "  - {name: github, kind: github, endpoint: %q, timeout: 2s, options: {owner: torture, repo: tickets, token_env: TRT_TOKEN}}\n", f.github.URL())
	fmt.Fprintf(&b, "  - {name: jira, kind: jira, endpoint: %q, timeout: 2s, options: {email: %q, token_env: TRT_TOKEN, project: %s}}\n", f.jira.URL(), fakeEmail, fakeProject)
	fmt.Fprintf(&b, "  - {name: slack, kind: slack, timeout: 2s, options: {webhook_url_env: TRT_SLACK_URL, bot_token_env: TRT_SLACK_BOT, channel: %s, api_endpoint: %q}}\n",
		slacktest.Channel, f.slack.APIURL())
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
			Type string `json:"type"`
			Data struct {
				Title string `json:"title"`
			} `json:"data"`
		}
		if json.Unmarshal(d.Body, &p) == nil && p.Type != "" && p.Type != webhookCreated {
			continue // a comment or an update: comments()
		}
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
		if m == slackParentText {
			continue // the thread the load comments in: no request's
		}
		add("slack", m, "", 1)
	}
	return out
}

// keyed reports whether kind takes a dedupe key, as the adapter declares.
func keyed(kind string) bool {
	c, err := targets.CapabilitiesOf(targets.Def{Name: kind, Kind: kind})
	return err == nil && c.DedupeKey
}
