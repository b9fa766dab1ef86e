package adapters_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"ticketrelay/delivery/downstream"
	"ticketrelay/delivery/downstream/downstreamtest"
	"ticketrelay/delivery/downstream/github"
	"ticketrelay/delivery/downstream/github/githubtest"
	"ticketrelay/delivery/downstream/jira/jiratest"
	"ticketrelay/delivery/downstream/pagerduty/pagerdutytest"
	"ticketrelay/delivery/downstream/redmine/redminetest"
	"ticketrelay/delivery/downstream/slack/slacktest"
	"ticketrelay/delivery/downstream/webhook"
	"ticketrelay/delivery/downstream/webhook/webhooktest"
	"ticketrelay/delivery/downstream/zendesk/zendesktest"
)

// namespace is the key_namespace of every stack: keys sent downstream are
// "e2e:<request_id>".
const namespace = "e2e"

// settleTimeout bounds how long a request may take to reach a final state.
const settleTimeout = 20 * time.Second

// scenario is what the fake does to the pipeline's create calls.
type scenario string

const (
	happy       scenario = "happy path"
	lost        scenario = "lost response"    // the first create is processed, its answer never sent
	serverError scenario = "500 then success" // the first create answers 500 without processing
	rateLimited scenario = "429 then success" // the first create answers 429 (not processed)
	badAuth     scenario = "rejected credentials"
	invalid     scenario = "validation error"
)

var scenarios = []scenario{happy, lost, serverError, rateLimited, badAuth, invalid}

// fake is one kind's fake API, set up for one scenario, and what the test
// needs to drive and inspect it.
type fake struct {
	target string            // the target's YAML (one list item under targets:)
	env    map[string]string // the dispatcher's environment (the target's secrets)
	faults *downstreamtest.Faults
	count  func() int // items the fake holds
	// check inspects the single stored item of a delivered request.
	check func(t *testing.T, key, ticketID string)
	// invalidArgs, if set, changes the tool's arguments for the invalid
	// scenario; invalidMsg is a piece of the API's own message.
	invalidArgs func(args map[string]any)
	invalidMsg  string
	// preexisting is the number of items the scenario's set-up stored.
	preexisting int
}

// kind is one downstream kind and what the pipeline guarantees toward it.
type kind struct {
	name string
	// retrySafe: a create whose outcome is unknown can be settled without
	// a blind resend (a dedupe key, or a consistent lookup).
	retrySafe bool
	// A resend after a lost answer is a second create call (keyed kinds);
	// for a consistent lookup the second attempt only looks.
	resendsAfterLoss bool
	hasExternalID    bool
	hasURL           bool
	// noInvalid says why no ticket can make this API reject it.
	noInvalid string
	setup     func(t *testing.T, sc scenario, requestID string) fake
}

const (
	email = "bot@acme.test"
	// whsec is a Standard Webhooks signing secret ("whsec_" + base64 of 24 bytes).
	whsec = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
)

var kinds = []kind{
	{
		name: "webhook", retrySafe: true, resendsAfterLoss: true, hasExternalID: true, hasURL: true,
		setup: func(t *testing.T, sc scenario, id string) fake {
			const token = "hook-token-1"
			f := webhooktest.New(t, webhooktest.Options{Token: token, SigningSecret: whsec})
			env := map[string]string{"HOOK_SECRET": whsec, "HOOK_TOKEN": token}
			if sc == badAuth {
				env["HOOK_TOKEN"] = "revoked-token" // 401 problem+json
			}
			fk := fake{
				target: "  - name: ops-hook\n    kind: webhook\n    endpoint: " + yamlQuote(f.URL()) +
					"\n    timeout: 5s\n    options: {signing_secret_env: HOOK_SECRET, token_env: HOOK_TOKEN}\n",
				env: env, faults: &f.Faults, count: f.Count,
				check: func(t *testing.T, key, ticketID string) {
					d := f.Deliveries()[0]
					if d.Key != key || d.WebhookID != key || !strings.Contains(string(d.Body), ticketID) {
						t.Errorf("webhook delivery key %q, webhook-id %q, body %s; want key %q and ticket %s", d.Key, d.WebhookID, d.Body, key, ticketID)
					}
				},
			}
			if sc == invalid {
				// The receiver already holds this Idempotency-Key for another
				// payload (an earlier deployment reused the namespace): 422.
				seed(t, webhookTarget(f.URL(), token), id)
				fk.preexisting = 1
				fk.invalidMsg = "already used with another payload"
			}
			return fk
		},
	},
	{
		name: "zendesk", retrySafe: true, resendsAfterLoss: true, hasExternalID: true, hasURL: true,
		noInvalid: "every ticket that passes ticket.Normalize is a valid Zendesk ticket (a blank body sends the title as the " +
			"first comment; priorities are Zendesk's), and a key Zendesk saw with another body is looked up and delivered, not " +
			"failed; the 422 path is covered by the adapter's conformance test",
		setup: func(t *testing.T, sc scenario, id string) fake {
			const token = "zd-token-1"
			f := zendesktest.New(t, email, token, nil)
			env := map[string]string{"ZENDESK_TOKEN": token}
			if sc == badAuth {
				env["ZENDESK_TOKEN"] = "revoked-token" // 401 Couldn't authenticate you
			}
			fk := fake{
				target: "  - name: support\n    kind: zendesk\n    endpoint: " + yamlQuote(f.URL()) +
					"\n    options: {email: " + email + ", token_env: ZENDESK_TOKEN}\n",
				env: env, faults: &f.Faults, count: f.Count,
				check: func(t *testing.T, key, ticketID string) {
					tk := f.Tickets()[0]
					if tk.ExternalID != key || !strings.Contains(tk.Subject, "Disk full") {
						t.Errorf("zendesk ticket %+v; want external_id %q", tk, key)
					}
					if sc == lost && f.Lookups("hit") != 1 {
						t.Errorf("the resend after the lost answer should be an idempotency hit; hits %d", f.Lookups("hit"))
					}
				},
			}
			return fk
		},
	},
	{
		name: "pagerduty", retrySafe: true, resendsAfterLoss: true, hasExternalID: true, hasURL: false,
		noInvalid: "every ticket that passes ticket.Normalize is a valid trigger event (summary non-blank, source and severity " +
			"set by the adapter, dedup_key <= 255); the 400 path is covered by the adapter's conformance test",
		setup: func(t *testing.T, sc scenario, id string) fake {
			const key = "0123456789abcdef0123456789abcdef"
			f := pagerdutytest.New(t, key)
			env := map[string]string{"PD_ROUTING_KEY": key}
			if sc == badAuth {
				// The Events API has no 401: a routing key of no integration is
				// 400 "Invalid routing key", which the adapter counts as auth.
				env["PD_ROUTING_KEY"] = "fedcba9876543210fedcba9876543210"
			}
			return fake{
				target: "  - name: oncall\n    kind: pagerduty\n    endpoint: " + yamlQuote(f.URL()) +
					"\n    options: {routing_key_env: PD_ROUTING_KEY, source: e2e-host}\n",
				env: env, faults: &f.Faults, count: f.Count,
				check: func(t *testing.T, key, ticketID string) {
					a := f.Alerts()[0]
					wantEvents := 1
					if sc == lost {
						wantEvents = 2 // the resend applied to the open alert
					}
					if a.DedupKey != key || a.Source != "e2e-host" || a.Severity != "error" || !a.Open || a.Events != wantEvents {
						t.Errorf("pagerduty alert %+v; want dedup_key %q, source e2e-host, severity error, open, %d events", a, key, wantEvents)
					}
				},
			}
		},
	},
	{
		name: "github", retrySafe: true, resendsAfterLoss: false, hasExternalID: true, hasURL: true,
		setup: func(t *testing.T, sc scenario, id string) fake {
			const token = "ghp_token1"
			f := githubtest.New(t, "acme", "support", token)
			env := map[string]string{"GITHUB_TOKEN": token}
			if sc == badAuth {
				env["GITHUB_TOKEN"] = "ghp_revoked" // 401 Bad credentials
			}
			// Titles and labels past GitHub's limits are cut to fit, so no
			// ticket is refused; a repository with issues turned off is (410).
			f.IssuesDisabled = sc == invalid
			return fake{
				target: "  - name: bugs\n    kind: github\n    endpoint: " + yamlQuote(f.URL()) +
					"\n    options: {owner: acme, repo: support, token_env: GITHUB_TOKEN}\n",
				env: env, faults: &f.Faults, count: f.Count,
				check: func(t *testing.T, key, ticketID string) {
					is := f.Issues()[0]
					if !slices.Contains(is.Labels, github.KeyLabel(key)) || !strings.Contains(is.Body, ticketID) {
						t.Errorf("github issue %+v; want the key label %s and ticket %s", is, github.KeyLabel(key), ticketID)
					}
				},
				invalidMsg: "Issues are disabled for this repo",
			}
		},
	},
	{
		name: "redmine", retrySafe: true, resendsAfterLoss: false, hasExternalID: true, hasURL: true,
		setup: func(t *testing.T, sc scenario, id string) fake {
			const key = "redmine-key-1"
			f := redminetest.New(t, key, "support", 5)
			env := map[string]string{"REDMINE_API_KEY": key}
			if sc == badAuth {
				env["REDMINE_API_KEY"] = "revoked-key" // 401, empty body
			}
			project := "support"
			if sc == invalid {
				// A project with no tracker enabled: 422 (Redmine replaces a
				// tracker_id the project does not enable without an error).
				f.AddProject(redminetest.Project{ID: 2, Identifier: "no-trackers"})
				project = "no-trackers"
			}
			return fake{
				target: "  - name: tracker\n    kind: redmine\n    endpoint: " + yamlQuote(f.URL()) +
					"\n    options: {api_key_env: REDMINE_API_KEY, project: " + project + ", tracker_id: 2, custom_field_id: 5, priority_ids: 'normal=2, high=3'}\n",
				env: env, faults: &f.Faults, count: f.Count,
				check: func(t *testing.T, key, ticketID string) {
					is := f.Issues()[0]
					if is.Custom[5] != key || is.Subject != "Disk full on db-7" || is.TrackerID != 2 || is.PriorityID != 3 ||
						!strings.Contains(is.Description, ticketID) {
						t.Errorf("redmine issue %+v; want key %q in custom field 5, tracker 2, priority 3 and ticket %s", is, key, ticketID)
					}
				},
				invalidMsg: "Tracker cannot be blank",
			}
		},
	},
	{
		name: "jira", retrySafe: false, hasExternalID: true, hasURL: true,
		setup: func(t *testing.T, sc scenario, id string) fake {
			const token = "atl-token-1"
			// Its search lags a minute behind a create, as Jira Cloud's may.
			f := jiratest.New(t, email, token, "OPS", time.Minute, nil)
			env := map[string]string{"JIRA_TOKEN": token}
			if sc == badAuth {
				env["JIRA_TOKEN"] = "revoked-token" // 401
			}
			issueType := "Task"
			if sc == invalid {
				issueType = "Story" // not an issue type of the project: 400
			}
			return fake{
				target: "  - name: ops-jira\n    kind: jira\n    endpoint: " + yamlQuote(f.URL()) +
					"\n    options: {email: " + email + ", token_env: JIRA_TOKEN, project: OPS, issue_type: " + issueType + "}\n",
				env: env, faults: &f.Faults, count: f.Count,
				check: func(t *testing.T, key, ticketID string) {
					is := f.Issues()[0]
					if is.Project != "OPS" || is.Type != "Task" || !strings.HasPrefix(is.Summary, "Disk full") {
						t.Errorf("jira issue %+v", is)
					}
				},
				invalidMsg: "issuetype: valid issue type is required",
			}
		},
	},
	{
		name: "slack", retrySafe: false, hasExternalID: false, hasURL: false,
		setup: func(t *testing.T, sc scenario, id string) fake {
			f := slacktest.New(t)
			env := map[string]string{"SLACK_WEBHOOK_URL": f.URL()}
			if sc == badAuth {
				// Slack answers a revoked hook secret with 403 invalid_token.
				env["SLACK_WEBHOOK_URL"] = f.WrongSecretURL()
			}
			if sc == invalid {
				f.Archive() // 410 channel_is_archived
			}
			return fake{
				target: "  - name: alerts\n    kind: slack\n    options: {webhook_url_env: SLACK_WEBHOOK_URL}\n",
				env:    env, faults: &f.Faults, count: f.Count,
				check: func(t *testing.T, key, ticketID string) {
					if m := f.Messages()[0]; !strings.Contains(m, ticketID) || !strings.Contains(m, "Disk full") {
						t.Errorf("slack message %q; want the title and ticket %s", m, ticketID)
					}
				},
				invalidMsg: "channel_is_archived",
			}
		},
	},
}

// targetName reads the target's name from its YAML item.
func targetName(item string) string {
	name, _, _ := strings.Cut(strings.TrimPrefix(item, "  - name: "), "\n")
	return name
}

func webhookTarget(url, token string) downstream.Target {
	tg, err := webhook.New(webhook.Config{Name: "seed", URL: url, SigningSecret: downstream.NewSecret(whsec), Token: downstream.NewSecret(token)})
	if err != nil {
		panic(err)
	}
	return tg
}

// seed stores, under the key the pipeline will use for requestID, another
// ticket than the one the test creates.
func seed(t *testing.T, tg downstream.Target, requestID string) {
	t.Helper()
	d := downstreamtest.NewDelivery(requestID)
	d.Key = downstream.Key(namespace, requestID)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := tg.Deliver(ctx, d); err != nil {
		t.Fatalf("seeding the fake: %v", err)
	}
}

// TestPipelinePerKind runs every scenario against every kind, each on a
// stack of its own: a fake, a dispatcher with its embedded NATS, mcp-front,
// one SQLite file, an MCP client.
func TestPipelinePerKind(t *testing.T) {
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			for _, sc := range scenarios {
				t.Run(string(sc), func(t *testing.T) {
					t.Parallel()
					if sc == invalid && k.noInvalid != "" {
						t.Skip("no validation error is reachable through the pipeline: " + k.noInvalid)
					}
					runScenario(t, k, sc)
				})
			}
		})
	}
}

func runScenario(t *testing.T, k kind, sc scenario) {
	id := "req-" + k.name + "-" + strings.ReplaceAll(string(sc), " ", "-")
	key := downstream.Key(namespace, id)
	f := k.setup(t, sc, id)
	target := targetName(f.target)
	tool := "create_in_" + strings.ReplaceAll(target, "-", "_")
	config := "key_namespace: " + namespace + "\ntargets:\n" + f.target +
		"tools:\n  - name: " + tool + "\n    target: " + target + "\n    description: File the ticket in " + target + ".\n"

	switch sc {
	case lost:
		f.faults.Next(downstreamtest.LoseResponse)
	case serverError:
		f.faults.Next(downstreamtest.ServerError)
	case rateLimited:
		f.faults.SetRetryAfter(time.Second)
		f.faults.Next(downstreamtest.RateLimited)
	}
	servedBefore := f.faults.Served()

	s := startStack(t, config, f.env)
	args := map[string]any{
		"request_id": id,
		"title":      "Disk full on db-7",
		"body":       "The data volume of db-7 is at 100%.\nWrites fail since 03:12.",
		"priority":   "high",
		"labels":     []string{"e2e", "storage"},
	}
	if sc == invalid && f.invalidArgs != nil {
		f.invalidArgs(args)
	}
	created := s.create(t, tool, args)
	if created.Target != target {
		t.Fatalf("created for target %q, want %q", created.Target, target)
	}
	st := s.settle(t, id, settleTimeout)
	creates := f.faults.Served() - servedBefore // create calls that reached the fake
	if st.TicketID != created.TicketID || st.Target != target {
		t.Errorf("find_request %+v does not match the create answer %+v", st, created)
	}

	// What each scenario must end in.
	want := struct {
		status  string
		items   int
		creates int
	}{"delivered", 1, 1}
	switch sc {
	case lost:
		switch {
		case !k.retrySafe: // no key, no consistent lookup: never resent
			want.status = "uncertain"
		case k.resendsAfterLoss: // the same key again
			want.creates = 2
		}
	case serverError:
		// A 5xx may have created the item: only a kind that can settle that
		// doubt retries; the others never resend blindly.
		if k.retrySafe {
			want.creates = 2
		} else {
			want.status, want.items = "uncertain", 0
		}
	case rateLimited:
		// A 429 says the request was not processed: every kind retries.
		want.creates = 2
	case badAuth, invalid:
		want.status, want.items = "failed", f.preexisting
	}

	if got := f.count(); got != want.items {
		t.Errorf("the fake holds %d items, want %d", got, want.items)
	}
	if creates != want.creates {
		t.Errorf("%d create calls reached the fake, want %d", creates, want.creates)
	}
	if st.Status != want.status {
		t.Fatalf("request ended %s (%s; last error %q); want %s", st.Status, st.Detail, st.LastError, want.status)
	}

	switch st.Status {
	case "delivered":
		if k.hasExternalID && st.ExternalID == "" || k.hasURL && !strings.HasPrefix(st.ExternalURL, "http") {
			t.Errorf("delivered without external id/URL: %+v", st)
		}
		if k.name == "pagerduty" && st.ExternalID != key {
			t.Errorf("pagerduty external id %q, want the dedup key %q", st.ExternalID, key)
		}
		if st.LastError != "" {
			t.Errorf("delivered with last_error %q", st.LastError)
		}
		f.check(t, key, created.TicketID)
	case "uncertain":
		// The agent is told what to check, and nothing is resent.
		for _, w := range []string{"Check " + target, created.TicketID, "before creating it again"} {
			if !strings.Contains(st.Detail, w) {
				t.Errorf("uncertain detail %q does not say %q", st.Detail, w)
			}
		}
		if !strings.Contains(st.LastError, "no consistent lookup") {
			t.Errorf("uncertain last_error %q does not say why", st.LastError)
		}
		if st.Attempts != 1 {
			t.Errorf("uncertain after %d attempts, want 1", st.Attempts)
		}
		s.expectMetric(t, 1, "ticketrelay_uncertain_requests_total", "target", target)
	case "failed":
		if st.LastError == "" || !strings.Contains(st.Detail, st.LastError) {
			t.Errorf("failed without a reason: %+v", st)
		}
		if sc == invalid && !strings.Contains(st.LastError, f.invalidMsg) {
			t.Errorf("last_error %q does not carry the API's message %q", st.LastError, f.invalidMsg)
		}
		if st.Attempts != 1 {
			t.Errorf("failed after %d attempts; a permanent error must not be retried", st.Attempts)
		}
	}
	wantAuth := 0.0
	if sc == badAuth {
		wantAuth = 1
	}
	s.expectMetric(t, wantAuth, "ticketrelay_auth_failures_total", "target", target)
	s.expectMetric(t, 1, "ticketrelay_deliveries_total", "target", target, "outcome", st.Status)
}
