package slack_test

import (
	"context"
	"strings"
	"testing"

	"ticketrelay/delivery/downstream"
	"ticketrelay/delivery/downstream/downstreamtest"
	"ticketrelay/delivery/downstream/slack"
	"ticketrelay/delivery/downstream/slack/slacktest"
)

func newBotTarget(t *testing.T, f *slacktest.Fake, token string) *slack.Target {
	t.Helper()
	tg, err := slack.New(slack.Config{Name: "alerts", WebhookURL: downstream.NewSecret(f.URL()), BotToken: downstream.NewSecret(token),
		Channel: slacktest.Channel, APIBaseURL: f.APIURL(), WorkspaceURL: "https://acme.slack.com"})
	if err != nil {
		t.Fatal(err)
	}
	return tg
}

func TestCommentConformance(t *testing.T) {
	downstreamtest.RunComments(t, func(t *testing.T) downstreamtest.CommentHarness {
		f := slacktest.New(t)
		return downstreamtest.CommentHarness{
			Target:    newBotTarget(t, f, slacktest.BotToken),
			Faults:    &f.ReplyFaults,
			NewTicket: func() string { return f.AddParent("*[high] Printer on fire*") },
			Comments: func(ref string) []string {
				var out []string
				for _, r := range f.Replies(ref) {
					out = append(out, r.Text)
				}
				return out
			},
			Seed:     func(ref string, n int) { f.AddReplies(ref, n) },
			PageSize: slacktest.MaxReplies,
			Missing:  slacktest.Channel + "/1600000000.000001",
			BadRefs: []string{"1700000000", "C0123ABCD/abc", "https://evil.example/archives/C0123ABCD/p1700000000000001",
				"https://acme.slack.com/messages/C0123ABCD", "#general"},
			BadAuth: newBotTarget(t, f, "xoxb-revoked"),
		}
	})
}

func TestParseTicketPermalink(t *testing.T) {
	f := slacktest.New(t)
	tg := newBotTarget(t, f, slacktest.BotToken)
	for ref, want := range map[string]string{
		"https://acme.slack.com/archives/C0123ABCD/p1700000000123456":                             "C0123ABCD/1700000000.123456",
		"https://acme.slack.com/archives/C0123ABCD/p1700000000999999?thread_ts=1700000000.123456": "C0123ABCD/1700000000.123456",
		"G0ABCDEF/1700000000.123456": "G0ABCDEF/1700000000.123456",
		"1700000000.123456":          "C0123ABCD/1700000000.123456",
	} {
		if r, err := tg.ParseTicket(ref); err != nil || r.ExternalID != want {
			t.Errorf("ParseTicket(%q) = %+v, %v; want %s", ref, r, err, want)
		}
	}
}

// Without a bot token the target posts through its hook only: no comments,
// said before any call.
func TestNoBotTokenNoComments(t *testing.T) {
	f := slacktest.New(t)
	tg := newTarget(t, f.URL())
	if caps := tg.CommentCapabilities(); caps != (downstream.Capabilities{}) {
		t.Fatalf("comment capabilities without a bot token: %+v", caps)
	}
	_, err := tg.AddComment(context.Background(), downstreamtest.NewComment("c", "C0123ABCD/1700000000.000001"))
	if e := downstream.Classify(err); err == nil || e.Class != downstream.Permanent || !strings.Contains(err.Error(), "bot_token") {
		t.Fatalf("AddComment without a bot token: %v", err)
	}
}
