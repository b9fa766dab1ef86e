// Package slack posts tickets to a Slack incoming webhook (POST JSON to the
// hook URL → 200 "ok"). Slack takes no dedupe key and returns no message id,
// and nothing can find a posted message again: an attempt of unknown
// outcome is never resent (the forwarder marks it uncertain).
package slack

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"

	"ticketrelay/delivery/downstream"
	"ticketrelay/delivery/downstream/internal/rest"
)

// Capabilities: no key, no lookup.
var Capabilities = downstream.Capabilities{}

// Config configures one Slack target.
type Config struct {
	Name string
	// WebhookURL is the incoming webhook's URL; it is the credential.
	WebhookURL downstream.Secret
	// BotToken is an optional bot token (xoxb-…) for replies in a
	// message's thread (see AddComment); without it the target adds no
	// comments.
	BotToken downstream.Secret
	// Channel is the channel id (C0123ABCD) a bare ts refers to.
	Channel string
	// APIBaseURL is the Web API's base URL (default DefaultAPIURL).
	APIBaseURL string
	// WorkspaceURL is the workspace's address (https://acme.slack.com)
	// for the permalinks of replies (default https://slack.com).
	WorkspaceURL string
	downstream.HTTPConfig
}

// Target posts messages.
type Target struct {
	cfg     Config
	c       *rest.Client // the hook's: its URL is the credential
	web     *rest.Client // the Web API's, with the bot token
	apiBase string
}

var _ downstream.Target = (*Target)(nil)

// New validates cfg and builds the target.
func New(cfg Config) (*Target, error) {
	// The URL is the credential: no error shows any of it. A URL that does
	// not parse is refused here, not at each delivery (where the parse
	// error would quote it into the ledger).
	u := cfg.WebhookURL.Reveal()
	if !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://") {
		return nil, fmt.Errorf("slack %q: the webhook URL is not an http(s) URL", cfg.Name)
	}
	if pu, err := url.Parse(u); err != nil || pu.Host == "" {
		return nil, fmt.Errorf("slack %q: the webhook URL is malformed (not shown: it is the credential); "+
			"copy it again from the app's Incoming Webhooks page", cfg.Name)
	}
	c := rest.NewClient(cfg.HTTP, cfg.Now)
	c.HideURL = true
	if cfg.APIBaseURL == "" {
		cfg.APIBaseURL = DefaultAPIURL
	}
	apiBase, err := rest.BaseURL("slack", cfg.Name, cfg.APIBaseURL, DefaultAPIURL)
	if err != nil {
		return nil, fmt.Errorf("%w (the Web API endpoint)", err)
	}
	if cfg.Channel != "" && !regexp.MustCompile(`^[CGD][A-Z0-9]{2,}$`).MatchString(cfg.Channel) {
		return nil, fmt.Errorf("slack %q: channel %q: want a channel id (C0123ABCD), not a name", cfg.Name, cfg.Channel)
	}
	web := rest.NewClient(cfg.HTTP, cfg.Now).Redact(cfg.BotToken)
	return &Target{cfg: cfg, c: c, web: web, apiBase: apiBase}, nil
}

// Name implements downstream.Target.
func (t *Target) Name() string { return t.cfg.Name }

// Capabilities implements downstream.Target.
func (t *Target) Capabilities() downstream.Capabilities { return Capabilities }

// escape applies Slack's mrkdwn escaping (&, <, >).
func escape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}

// Text renders a ticket as a message.
func Text(d downstream.Delivery) string {
	var b strings.Builder
	fmt.Fprintf(&b, "*[%s] %s*", d.Ticket.Priority, escape(d.Ticket.Title))
	if body := strings.TrimSpace(d.Ticket.Body); body != "" {
		b.WriteString("\n" + escape(body))
	}
	if len(d.Ticket.Labels) > 0 {
		b.WriteString("\nlabels: " + escape(strings.Join(d.Ticket.Labels, ", ")))
	}
	b.WriteString("\nticket " + d.Ticket.ID)
	return b.String()
}

// Deliver posts the message. The receipt has no id: Slack returns none.
func (t *Target) Deliver(ctx context.Context, d downstream.Delivery) (downstream.Receipt, error) {
	req, err := t.c.NewJSONRequest(ctx, http.MethodPost, t.cfg.WebhookURL.Reveal(), map[string]string{"text": Text(d)})
	if err != nil {
		return downstream.Receipt{}, err
	}
	req.Header.Set("Accept", "*/*")
	resp, err := t.c.Do(req)
	if err != nil {
		return downstream.Receipt{}, err
	}
	body := strings.TrimSpace(string(resp.Body))
	if !resp.OK() {
		e := t.c.Fail(resp, rest.Message(resp))
		switch body {
		case "invalid_token", "no_service", "no_team", "team_disabled", "action_prohibited":
			// The hook URL was revoked, disabled or is wrong: a credential problem.
			e.Class, e.MayHaveActed = downstream.Auth, false
		}
		return downstream.Receipt{}, e
	}
	if body != "ok" {
		// A 200 that is not "ok": Slack's answer is unknown; it may have posted.
		return downstream.Receipt{}, &downstream.Error{Class: downstream.Transient, MayHaveActed: true, StatusCode: resp.Status,
			Err: fmt.Errorf("slack answered %q instead of ok", body)}
	}
	return downstream.Receipt{}, nil
}
