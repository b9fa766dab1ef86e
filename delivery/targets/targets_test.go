package targets_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"ticketrelay/delivery/downstream"
	"ticketrelay/delivery/downstream/downstreamtest"
	"ticketrelay/delivery/downstream/github/githubtest"
	"ticketrelay/delivery/downstream/jira/jiratest"
	"ticketrelay/delivery/downstream/pagerduty/pagerdutytest"
	"ticketrelay/delivery/downstream/redmine/redminetest"
	"ticketrelay/delivery/downstream/slack/slacktest"
	"ticketrelay/delivery/downstream/webhook/webhooktest"
	"ticketrelay/delivery/downstream/zendesk/zendesktest"
	"ticketrelay/delivery/targets"
)

func TestCapabilitiesOf(t *testing.T) {
	for _, c := range []struct {
		kind   string
		keyed  bool
		lookup downstream.LookupKind
	}{
		{"local", true, downstream.LookupConsistent},
		{"webhook", true, downstream.LookupNone},
		{"zendesk", true, downstream.LookupConsistent},
		{"pagerduty", true, downstream.LookupNone},
		{"github", false, downstream.LookupConsistent},
		{"jira", false, downstream.LookupEventual},
		{"redmine", false, downstream.LookupConsistent},
		{"slack", false, downstream.LookupNone},
	} {
		// No endpoint, no secret: capabilities come from the kind alone.
		caps, err := targets.CapabilitiesOf(targets.Def{Name: "x", Kind: c.kind})
		if err != nil {
			t.Fatalf("%s: %v", c.kind, err)
		}
		if caps.DedupeKey != c.keyed || caps.Idempotent() != c.keyed || caps.Lookup != c.lookup {
			t.Errorf("%s: %+v; want DedupeKey %v, Lookup %s", c.kind, caps, c.keyed, c.lookup)
		}
	}
	// A webhook receiver declared not to honour Idempotency-Key is neither
	// keyed nor idempotent: its tool is exported without idempotentHint.
	if caps, _ := targets.CapabilitiesOf(targets.Def{Name: "x", Kind: "webhook", NoDedupe: true}); caps.DedupeKey || caps.Idempotent() || caps.Lookup != downstream.LookupNone {
		t.Errorf("webhook that does not dedupe: %+v", caps)
	}
	if caps, _ := targets.CapabilitiesOf(targets.Def{Kind: "zendesk"}); caps.Window != 2*time.Hour {
		t.Errorf("zendesk window %v, want 2h", caps.Window)
	}
	if _, err := targets.CapabilitiesOf(targets.Def{Name: "x", Kind: "trello"}); err == nil || !strings.Contains(err.Error(), `unknown kind "trello"`) {
		t.Errorf("unknown kind: %v", err)
	}
	if len(targets.KindNames()) != 8 {
		t.Errorf("KindNames = %v", targets.KindNames())
	}
}

func TestCapabilitiesByName(t *testing.T) {
	m, err := targets.CapabilitiesByName([]targets.Def{{Name: "a", Kind: "local"}, {Name: "b", Kind: "slack"}})
	if err != nil {
		t.Fatal(err)
	}
	if !m["a"].Idempotent() || m["b"].Idempotent() || len(m) != 2 {
		t.Fatalf("CapabilitiesByName = %+v", m)
	}
	if _, err := targets.CapabilitiesByName([]targets.Def{{Name: "c", Kind: "nope"}}); err == nil {
		t.Fatal("an unknown kind passed")
	}
}

func TestZeroConfigOpensLocal(t *testing.T) {
	dir := t.TempDir()
	tgs, closeAll, err := targets.Open(targets.DefaultDefs(), dir, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	if len(tgs) != 1 || tgs[0].Name() != targets.DefaultName {
		t.Fatalf("targets %v", tgs)
	}
	if _, err := tgs[0].Deliver(context.Background(), downstreamtest.NewDelivery("req-local")); err != nil {
		t.Fatal(err)
	}
	if err := closeAll(); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "tickets.jsonl")); err != nil || !strings.Contains(string(b), "req-local") {
		t.Fatalf("local file: %q, %v", b, err)
	}
}

// Open wires every kind's Def fields into its adapter: one delivery each
// reaches its fake with the right credentials.
func TestOpenEveryKind(t *testing.T) {
	const rk = "0123456789abcdef0123456789abcdef"
	wh := webhooktest.New(t, webhooktest.Options{Token: "wt", SigningSecret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"})
	zd := zendesktest.New(t, "a@b.c", "zt", nil)
	pd := pagerdutytest.New(t, rk, pagerdutytest.Options{APIToken: "pd-rest-s3cr3t"})
	gh := githubtest.New(t, "acme", "support", "gt")
	ji := jiratest.New(t, "a@b.c", "jt", "OPS", 0, nil)
	sl := slacktest.New(t)
	rm := redminetest.New(t, "rk", "support", 5)
	s := downstream.NewSecret
	defs := []targets.Def{
		{Name: "local", Kind: "local", Path: filepath.Join(t.TempDir(), "t.jsonl")},
		{Name: "hook", Kind: "webhook", Endpoint: wh.URL(), Token: s("wt"), SigningSecret: s("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")},
		{Name: "support", Kind: "zendesk", Endpoint: zd.URL(), Email: "a@b.c", Token: s("zt")},
		{Name: "oncall", Kind: "pagerduty", Endpoint: pd.URL(), RoutingKey: s(rk), APIToken: s("pd-rest-s3cr3t"), APIEndpoint: pd.APIURL()},
		{Name: "bugs", Kind: "github", Endpoint: gh.URL(), Owner: "acme", Repo: "support", Token: s("gt")},
		{Name: "ops", Kind: "jira", Endpoint: ji.URL(), Email: "a@b.c", Token: s("jt"), Project: "OPS", Timeout: 5 * time.Second},
		{Name: "alerts", Kind: "slack", WebhookURL: s(sl.URL())},
		{Name: "tracker", Kind: "redmine", Endpoint: rm.URL(), Token: s("rk"), Project: "support", TrackerID: 2, CustomFieldID: 5,
			PriorityIDs: map[string]int{"high": 4}},
	}
	tgs, closeAll, err := targets.Open(defs, t.TempDir(), time.Now)
	if err != nil {
		t.Fatal(err)
	}
	defer closeAll()
	for i, tg := range tgs {
		if tg.Name() != defs[i].Name {
			t.Fatalf("target %d is %q, want %q", i, tg.Name(), defs[i].Name)
		}
		want, _ := targets.CapabilitiesOf(defs[i])
		if tg.Capabilities() != want {
			t.Fatalf("%s: Capabilities() %+v differ from CapabilitiesOf %+v", tg.Name(), tg.Capabilities(), want)
		}
		if _, err := tg.Deliver(context.Background(), downstreamtest.NewDelivery("req-open")); err != nil {
			t.Fatalf("%s: %v", tg.Name(), err)
		}
	}
	for name, n := range map[string]int{"webhook": wh.Count(), "zendesk": zd.Count(), "pagerduty": pd.Count(),
		"github": gh.Count(), "jira": ji.Count(), "slack": sl.Count(), "redmine": rm.Count()} {
		if n != 1 {
			t.Errorf("%s fake holds %d items, want 1", name, n)
		}
	}
	// The ticket was accepted long before now: the pagerduty target looked
	// its incident up first, with the REST key at the REST endpoint.
	if n := len(pd.Lookups()); n != 1 {
		t.Errorf("pagerduty: %d authorized incident lookups, want 1 (api_token and api_endpoint reach the adapter)", n)
	}
	if is := rm.Issues()[0]; is.TrackerID != 2 || is.PriorityID != 4 || is.Custom[5] != "test:req-open" {
		t.Errorf("redmine issue %+v; want tracker 2, priority 4 (high), the key in custom field 5", is)
	}
	if out := fmt.Sprintf("%+v %v", defs, tgs); strings.Contains(out, "whsec_") || strings.Contains(out, rk) || strings.Contains(out, "s3cr3t") {
		t.Fatalf("printing defs or targets shows a secret: %s", out)
	}
}

func TestValidate(t *testing.T) {
	for _, c := range []struct {
		def  targets.Def
		want string
	}{
		{targets.Def{Name: "Bad Name", Kind: "local"}, "target name"},
		{targets.Def{Name: "x", Kind: "trello"}, `unknown kind "trello"`},
		{targets.Def{Name: "x", Kind: "github", Owner: "a", Repo: "b"}, "token is required"},
		{targets.Def{Name: "x", Kind: "pagerduty"}, "routing key is required"},
		{targets.Def{Name: "x", Kind: "pagerduty", RoutingKey: downstream.NewSecret("k"), APIEndpoint: "https://api.example"}, "without a REST API key"},
		{targets.Def{Name: "x", Kind: "pagerduty", RoutingKey: downstream.NewSecret("k"), APIToken: downstream.NewSecret("t"), APIEndpoint: "api.example"},
			"not an http(s) URL"},
		{targets.Def{Name: "x", Kind: "slack", WebhookURL: downstream.NewSecret("hooks.slack.com/x")}, "not an http(s) URL"},
		{targets.Def{Name: "x", Kind: "jira", Endpoint: "https://a.atlassian.net", Email: "e", Token: downstream.NewSecret("t")}, "project key is required"},
		{targets.Def{Name: "x", Kind: "webhook", Endpoint: "https://x", Timeout: -time.Second}, "negative"},
		{targets.Def{Name: "x", Kind: "redmine", Project: "p", Token: downstream.NewSecret("k")}, "not an http(s) URL"},
		{targets.Def{Name: "x", Kind: "redmine", Endpoint: "https://r", Project: "p"}, "API key is required"},
		{targets.Def{Name: "x", Kind: "redmine", Endpoint: "https://r", Token: downstream.NewSecret("k")}, "project identifier is required"},
	} {
		err := c.def.Validate()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Validate(%+v) = %v; want %q", c.def, err, c.want)
		}
		if _, _, err := targets.Open([]targets.Def{c.def}, t.TempDir(), time.Now); err == nil {
			t.Errorf("Open(%+v) succeeded", c.def)
		}
	}
	// Public hosts are the defaults where the API has one.
	ok := []targets.Def{
		{Name: "gh", Kind: "github", Owner: "a", Repo: "b", Token: downstream.NewSecret("t")},
		{Name: "pd", Kind: "pagerduty", RoutingKey: downstream.NewSecret("k")},
		{Name: "pd-lookup", Kind: "pagerduty", RoutingKey: downstream.NewSecret("k"), APIToken: downstream.NewSecret("t")},
	}
	for _, d := range ok {
		if err := d.Validate(); err != nil {
			t.Errorf("Validate(%s) = %v", d.Name, err)
		}
	}
}

// A rate limit set in a Def (not through the file) is checked too, and
// RateLimits lists the limited targets only.
func TestRateLimits(t *testing.T) {
	hook := targets.Def{Name: "hook", Kind: "webhook", Endpoint: "https://x.example/hook"}
	for _, rl := range []downstream.RateLimit{{PerSecond: 0, Burst: 1}, {PerSecond: -1, Burst: 1}, {PerSecond: 1, Burst: 0}} {
		d := hook
		d.RateLimit = rl
		if err := d.ValidateShape(); err == nil || !strings.Contains(err.Error(), `target "hook": rate_limit:`) {
			t.Errorf("rate limit %+v: %v", rl, err)
		}
	}
	limited := hook
	limited.Name, limited.RateLimit = "limited", downstream.RateLimit{PerSecond: 2, Burst: 1}
	if err := limited.Validate(); err != nil {
		t.Fatal(err)
	}
	got := targets.RateLimits([]targets.Def{hook, limited})
	if len(got) != 1 || got["limited"] != limited.RateLimit {
		t.Fatalf("RateLimits = %+v", got)
	}
}
