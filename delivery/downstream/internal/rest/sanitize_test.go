package rest_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"ticketrelay/delivery/downstream"
	"ticketrelay/delivery/downstream/downstreamtest"
	"ticketrelay/delivery/downstream/github"
	"ticketrelay/delivery/downstream/internal/rest"
	"ticketrelay/delivery/downstream/jira"
	"ticketrelay/delivery/downstream/pagerduty"
	"ticketrelay/delivery/downstream/redmine"
	"ticketrelay/delivery/downstream/slack"
	"ticketrelay/delivery/downstream/webhook"
	"ticketrelay/delivery/downstream/zendesk"
)

// terminalAttack is what a hostile or broken receiver may put in an answer:
// an OSC that retitles the terminal, a clear-screen CSI, an 8-bit CSI (C1),
// DEL, a NUL, a line break that forges a second log line, and a byte that
// is not UTF-8.
const terminalAttack = "\x1b]0;pwned\x07\x1b[2J\u009b31m\x7f\x00\r\nlevel=ERROR msg=forged\xff"

// clean reports what makes s unsafe to print: a control character or a
// byte that is not UTF-8.
func unsafeText(s string) string {
	if !utf8.ValidString(s) {
		return "invalid UTF-8"
	}
	for i, r := range s {
		if r < 0x20 || (r >= 0x7f && r <= 0x9f) {
			return fmt.Sprintf("control character U+%04X at byte %d", r, i)
		}
	}
	return ""
}

func TestMessageStripsControlCharacters(t *testing.T) {
	got := rest.Message(&rest.Response{Status: 400, Body: []byte("bad request" + terminalAttack + " end")})
	if why := unsafeText(got); why != "" {
		t.Fatalf("Message = %q: %s", got, why)
	}
	if !strings.HasPrefix(got, "bad request") || !strings.HasSuffix(got, "level=ERROR msg=forged\uFFFD end") {
		t.Fatalf("Message = %q: the readable text is not kept", got)
	}
	// Cut at 500 bytes without splitting a character.
	long := strings.Repeat("a", 499) + strings.Repeat("é", 100)
	got = rest.Message(&rest.Response{Status: 400, Body: []byte(long)})
	if !utf8.ValidString(got) || len(got) > 503 || !strings.HasSuffix(got, "…") {
		t.Fatalf("a long body becomes %d bytes, valid UTF-8 %v: %q", len(got), utf8.ValidString(got), got[len(got)-10:])
	}
	// Fail cleans a message an adapter read from the answer's JSON too.
	e := rest.NewClient(nil, nil).Fail(&rest.Response{Status: 422}, "Validation Failed"+terminalAttack)
	if why := unsafeText(e.Error()); why != "" {
		t.Fatalf("Fail: %q: %s", e.Error(), why)
	}
}

func TestCleanRedactsLongestFirst(t *testing.T) {
	got := rest.Clean("key abc123 and abc", downstream.NewSecret("abc"), downstream.NewSecret("abc123"))
	if want := "key " + downstream.Redacted + " and " + downstream.Redacted; got != want {
		t.Fatalf("Clean = %q, want %q", got, want)
	}
}

// echoServer answers every request 400 with what a proxy or receiver that
// echoes requests would: the request line, its headers and its body, and
// the terminal attack, as text or inside every error field the adapters
// read (jsonFields).
func echoServer(t *testing.T, jsonFields bool) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var b strings.Builder
		fmt.Fprintf(&b, "upstream error; request was: %s %s |", r.Method, r.URL.RequestURI())
		for _, k := range slices.Sorted(func(yield func(string) bool) {
			for k := range r.Header {
				if !yield(k) {
					return
				}
			}
		}) {
			fmt.Fprintf(&b, " %s: %s |", k, strings.Join(r.Header[k], ", "))
		}
		fmt.Fprintf(&b, " body: %s %s", body, terminalAttack)
		echo := b.String()
		if !jsonFields {
			w.Header().Set("Content-Type", "text/plain")
			w.WriteHeader(http.StatusBadRequest)
			io.WriteString(w, echo)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		json.NewEncoder(w).Encode(map[string]any{
			"message": echo, "title": "Bad Request", "detail": echo, "error": echo, "description": echo,
			"errorMessages": []string{echo}, "errors": []string{echo},
		})
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// Every adapter that holds a credential keeps it out of its errors even when
// the answer echoes the request (headers, body, URL), and no error carries a
// control character.
func TestAdapterErrorsHideEchoedCredentials(t *testing.T) {
	const (
		ghToken      = "ghp_GITHUBTOKENSECRET0001"
		redmineKey   = "REDMINEKEYSECRET0002"
		jiraToken    = "JIRATOKENSECRET0003"
		zendeskToken = "ZENDESKTOKENSECRET0004"
		routingKey   = "ROUTINGKEYSECRET00000000000000005"
		pdAPIToken   = "PDAPITOKENSECRET0006"
		hookToken    = "HOOKTOKENSECRET0007"
		signing      = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
		hookPass     = "HOOKPASSWORDSECRET0008"
		hookQuery    = "HOOKQUERYSECRET0009"
		slackPath    = "SLACKPATHSECRET0010"
	)
	secrets := []string{ghToken, redmineKey, jiraToken, zendeskToken, routingKey, pdAPIToken, hookToken,
		"MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", hookPass, hookQuery, slackPath}
	d := downstreamtest.NewDelivery("req-echo")
	for _, jsonFields := range []bool{false, true} {
		base := echoServer(t, jsonFields)
		type call struct {
			name string
			do   func() error
		}
		must := func(tg any, err error) any {
			t.Helper()
			if err != nil {
				t.Fatal(err)
			}
			return tg
		}
		gh := must(github.New(github.Config{Name: "gh", BaseURL: base, Owner: "o", Repo: "r", Token: downstream.NewSecret(ghToken)})).(*github.Target)
		rm := must(redmine.New(redmine.Config{Name: "rm", BaseURL: base, Project: "p", APIKey: downstream.NewSecret(redmineKey)})).(*redmine.Target)
		jr := must(jira.New(jira.Config{Name: "j", BaseURL: base, Email: "a@b.example", Token: downstream.NewSecret(jiraToken), Project: "OPS"})).(*jira.Target)
		zd := must(zendesk.New(zendesk.Config{Name: "z", BaseURL: base, Email: "a@b.example", Token: downstream.NewSecret(zendeskToken)})).(*zendesk.Target)
		pd := must(pagerduty.New(pagerduty.Config{Name: "pd", BaseURL: base, APIBaseURL: base,
			RoutingKey: downstream.NewSecret(routingKey), APIToken: downstream.NewSecret(pdAPIToken)})).(*pagerduty.Target)
		wh := must(webhook.New(webhook.Config{Name: "w", URL: base + "/hook", Token: downstream.NewSecret(hookToken),
			SigningSecret: downstream.NewSecret(signing)})).(*webhook.Target)
		// Credentials in the URL: a password (sent as Basic auth by Go's
		// client) and a query token.
		whURL := must(webhook.New(webhook.Config{Name: "wu",
			URL: strings.Replace(base, "http://", "http://hook:"+hookPass+"@", 1) + "/hook?token=" + hookQuery})).(*webhook.Target)
		// Slack's hook URL is the credential: its path.
		sl := must(slack.New(slack.Config{Name: "s", WebhookURL: downstream.NewSecret(base + "/services/T0/B0/" + slackPath)})).(*slack.Target)
		ctx := context.Background()
		deliver := func(tg downstream.Target) func() error {
			return func() error { _, err := tg.Deliver(ctx, d); return err }
		}
		find := func(f downstream.Finder) func() error {
			return func() error { _, _, err := f.Find(ctx, d); return err }
		}
		for _, c := range []call{
			{"github deliver", deliver(gh)}, {"github find", find(gh)},
			{"redmine deliver", deliver(rm)}, {"redmine find", find(rm)},
			{"jira deliver", deliver(jr)}, {"jira find", find(jr)},
			{"zendesk deliver", deliver(zd)}, {"zendesk find", find(zd)},
			{"pagerduty deliver", deliver(pd)}, {"pagerduty find", find(pd)},
			{"webhook deliver", deliver(wh)}, {"webhook with credentials in its URL", deliver(whURL)},
			{"slack deliver", deliver(sl)},
		} {
			t.Run(fmt.Sprintf("%s json=%v", c.name, jsonFields), func(t *testing.T) {
				err := c.do()
				if err == nil {
					t.Fatal("no error from a 400 answer")
				}
				msg := err.Error()
				for _, s := range secrets {
					if strings.Contains(msg, s) {
						t.Errorf("the error shows the credential %q: %s", s, msg)
					}
				}
				if why := unsafeText(msg); why != "" {
					t.Errorf("the error holds a %s: %q", why, msg)
				}
				if !strings.Contains(msg, "upstream error") || !strings.Contains(msg, downstream.Redacted) {
					t.Errorf("the error does not show the answer with its credentials redacted: %s", msg)
				}
			})
		}
	}
}
