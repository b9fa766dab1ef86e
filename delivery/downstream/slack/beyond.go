package slack

// Comments are replies in a message's thread, through the Web API with a
// bot token (Config.BotToken, scopes chat:write and the history scope of
// the channel's kind): chat.postMessage with thread_ts. Slack takes no key
// for a message. Each reply carries the key's marker in its message
// metadata (event_type ticketrelay_comment), which Slack stores with the
// message and does not show; FindComment pages through the thread
// (conversations.replies with include_all_metadata, cursor pagination).
// Slack documents no read-after-write guarantee for that list, so the
// lookup is declared eventual: a reply found settles the comment, a miss
// proves nothing. Messages have no status, priority, labels or assignee:
// the target updates nothing.
//
// The ticket is a message: its permalink
// (https://WORKSPACE.slack.com/archives/C…/p1700000000123456), or
// CHANNEL/TS, or a bare ts in Config.Channel. A ticket posted through the
// incoming webhook has no ts in its receipt (the hook answers none): it is
// referred to by its permalink.

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"

	"ticketrelay/delivery/downstream"
	"ticketrelay/delivery/downstream/internal/rest"
)

// DefaultAPIURL is the Web API's base URL.
const DefaultAPIURL = "https://slack.com/api"

// MetadataType is the event_type of a reply's metadata.
const MetadataType = "ticketrelay_comment"

// RepliesPerPage is the page size a lookup asks for (Slack recommends no
// more than 200).
const RepliesPerPage = 200

// MaxText bounds a reply, in characters (Slack truncates messages over
// 40,000).
const MaxText = 40000

// maxPages bounds a lookup.
const maxPages = 100

var (
	_ downstream.Commenter     = (*Target)(nil)
	_ downstream.CommentFinder = (*Target)(nil)
)

// CommentCapabilities implements downstream.Commenter: an eventual lookup
// of the metadata marker with a bot token; nothing without one.
func (t *Target) CommentCapabilities() downstream.Capabilities {
	if t.cfg.BotToken.IsZero() {
		return downstream.Capabilities{}
	}
	return downstream.Capabilities{Lookup: downstream.LookupEventual}
}

var (
	permalink = regexp.MustCompile(`^/archives/([CGD][A-Z0-9]{2,})/p([0-9]{10})([0-9]{6})$`)
	channelTS = regexp.MustCompile(`^(?:([CGD][A-Z0-9]{2,})/)?([0-9]{10}\.[0-9]{6})$`)
)

type thread struct{ channel, ts string }

func (t *Target) parse(ref string) (thread, error) {
	s := strings.TrimSpace(ref)
	bad := downstream.BadTicket("slack", t.cfg.Name, ref,
		"a message's permalink (https://WORKSPACE.slack.com/archives/C0123ABCD/p1700000000123456), CHANNEL/TS (C0123ABCD/1700000000.123456) or a ts in the configured channel")
	if u, err := url.Parse(s); err == nil && (u.Scheme == "https" || u.Scheme == "http") {
		m := permalink.FindStringSubmatch(u.Path)
		host := strings.ToLower(u.Hostname())
		if m == nil || u.Scheme != "https" || !(host == "slack.com" || strings.HasSuffix(host, ".slack.com")) {
			return thread{}, bad
		}
		// A permalink to a reply names its thread in thread_ts.
		if tts := u.Query().Get("thread_ts"); tts != "" && channelTS.MatchString(tts) {
			return thread{channel: m[1], ts: tts}, nil
		}
		return thread{channel: m[1], ts: m[2] + "." + m[3]}, nil
	}
	m := channelTS.FindStringSubmatch(s)
	switch {
	case m == nil:
		return thread{}, bad
	case m[1] != "":
		return thread{channel: m[1], ts: m[2]}, nil
	case t.cfg.Channel == "":
		return thread{}, downstream.BadTicket("slack", t.cfg.Name, ref, "a channel with the ts (C0123ABCD/"+m[2]+"): no channel is configured")
	}
	return thread{channel: t.cfg.Channel, ts: m[2]}, nil
}

// ParseTicket implements downstream.TicketParser.
func (t *Target) ParseTicket(ref string) (downstream.Receipt, error) {
	th, err := t.parse(ref)
	if err != nil {
		return downstream.Receipt{}, err
	}
	return downstream.Receipt{ExternalID: th.channel + "/" + th.ts}, nil
}

func (t *Target) needToken() error {
	if !t.cfg.BotToken.IsZero() {
		return nil
	}
	return &downstream.Error{Class: downstream.Permanent, Err: fmt.Errorf(
		"slack %q: replies need a bot token (bot_token): the incoming webhook posts new messages only", t.cfg.Name)}
}

// webCall calls a Web API method. Slack answers most failures 200
// {"ok":false,"error":"…"}: auth errors are Auth, the rest Permanent; a
// 429 carries Retry-After.
func (t *Target) webCall(req *http.Request, out any) error {
	req.Header.Set("Authorization", "Bearer "+t.cfg.BotToken.Reveal())
	resp, err := t.web.Do(req)
	if err != nil {
		return err
	}
	if !resp.OK() {
		return t.web.Fail(resp, rest.Message(resp))
	}
	var status struct {
		OK    bool   `json:"ok"`
		Error string `json:"error"`
	}
	if err := resp.Result(&status); err != nil {
		return err
	}
	if !status.OK {
		e := &downstream.Error{Class: downstream.Permanent, StatusCode: resp.Status, Err: fmt.Errorf("slack: %s", rest.Clean(status.Error))}
		switch status.Error {
		case "not_authed", "invalid_auth", "account_inactive", "token_revoked", "token_expired", "no_permission", "missing_scope", "not_allowed_token_type":
			e.Class = downstream.Auth
		case "internal_error", "fatal_error", "service_unavailable", "request_timeout":
			e.Class, e.MayHaveActed = downstream.Transient, req.Method != http.MethodGet
		case "ratelimited":
			e.Class, e.Throttled = downstream.Transient, true
		}
		return e
	}
	return resp.Result(out)
}

// AddComment implements downstream.Commenter: a reply in the thread.
func (t *Target) AddComment(ctx context.Context, d downstream.CommentDelivery) (downstream.CommentReceipt, error) {
	msg, err := downstream.PrepareComment(t, d)
	if err != nil {
		return downstream.CommentReceipt{}, err
	}
	if err := t.needToken(); err != nil {
		return downstream.CommentReceipt{}, err
	}
	channel, ts, _ := strings.Cut(msg.ExternalID, "/") // ParseTicket's CHANNEL/TS
	th := thread{channel: channel, ts: ts}
	req, err := t.web.NewJSONRequest(ctx, http.MethodPost, t.apiBase+"/chat.postMessage", map[string]any{
		"channel": th.channel, "thread_ts": th.ts, "text": downstream.FitComment(escape(d.Body), "", MaxText),
		"metadata": map[string]any{"event_type": MetadataType, "event_payload": map[string]string{"marker": downstream.Marker(d.Key)}},
	})
	if err != nil {
		return downstream.CommentReceipt{}, err
	}
	var ans struct {
		TS string `json:"ts"`
	}
	if err := t.webCall(req, &ans); err != nil {
		return downstream.CommentReceipt{}, err
	}
	return t.commentReceipt(th, ans.TS), nil
}

func (t *Target) commentReceipt(th thread, ts string) downstream.CommentReceipt {
	return downstream.CommentReceipt{ExternalID: th.channel + "/" + ts,
		URL: fmt.Sprintf("%s/archives/%s/p%s?thread_ts=%s", t.webURL(), th.channel, strings.ReplaceAll(ts, ".", ""), th.ts)}
}

// webURL is where permalinks point: the workspace's address, or
// slack.com, which sends a signed-in user on to it.
func (t *Target) webURL() string {
	if t.cfg.WorkspaceURL != "" {
		return strings.TrimRight(t.cfg.WorkspaceURL, "/")
	}
	return "https://slack.com"
}

// FindComment implements downstream.CommentFinder.
func (t *Target) FindComment(ctx context.Context, d downstream.CommentDelivery) (downstream.CommentReceipt, bool, error) {
	th, err := t.parse(d.Ticket)
	if err != nil {
		return downstream.CommentReceipt{}, false, err
	}
	if err := t.needToken(); err != nil {
		return downstream.CommentReceipt{}, false, err
	}
	marker := downstream.Marker(d.Key)
	cursor := ""
	for range maxPages {
		q := url.Values{"channel": {th.channel}, "ts": {th.ts}, "include_all_metadata": {"true"}, "limit": {strconv.Itoa(RepliesPerPage)}}
		if cursor != "" {
			q.Set("cursor", cursor)
		}
		req, err := t.web.NewJSONRequest(ctx, http.MethodGet, t.apiBase+"/conversations.replies?"+q.Encode(), nil)
		if err != nil {
			return downstream.CommentReceipt{}, false, err
		}
		var page struct {
			Messages []struct {
				TS       string `json:"ts"`
				Metadata struct {
					EventType    string `json:"event_type"`
					EventPayload struct {
						Marker string `json:"marker"`
					} `json:"event_payload"`
				} `json:"metadata"`
			} `json:"messages"`
			HasMore          bool `json:"has_more"`
			ResponseMetadata struct {
				NextCursor string `json:"next_cursor"`
			} `json:"response_metadata"`
		}
		if err := t.webCall(req, &page); err != nil {
			return downstream.CommentReceipt{}, false, err
		}
		for _, m := range page.Messages {
			if m.Metadata.EventType == MetadataType && m.Metadata.EventPayload.Marker == marker {
				return t.commentReceipt(th, m.TS), true, nil
			}
		}
		if cursor = page.ResponseMetadata.NextCursor; cursor == "" {
			return downstream.CommentReceipt{}, false, nil
		}
	}
	return downstream.CommentReceipt{}, false, &downstream.Error{Class: downstream.Transient, Err: fmt.Errorf(
		"slack %q: the thread has more than %d pages of replies; the lookup stops there without an answer", t.cfg.Name, maxPages)}
}
