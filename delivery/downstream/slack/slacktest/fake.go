// Package slacktest is an httptest fake of a Slack workspace's incoming
// webhooks, keeping their documented contract: POST JSON to
// /services/T…/B…/secret → 200 "ok" (text body); errors are plain strings
// with a status: 400 invalid_payload or no_text, 403 invalid_token (right
// hook, wrong secret), 404 no_service (no such hook), 410
// channel_is_archived. Nothing dedupes: every accepted post is a message.
//
// And the Web API methods a thread reply needs (Authorization: Bearer
// BotToken, else 200 {"ok":false,"error":"invalid_auth"}; every failure
// but a 429 is 200 {"ok":false,"error"}):
//   - POST /api/chat.postMessage {channel, thread_ts, text, metadata
//     {event_type, event_payload}} → {"ok":true,"channel","ts","message"};
//     an unknown channel → channel_not_found, an unknown thread_ts →
//     thread_not_found, no text → no_text (ReplyFaults inject faults here)
//   - GET /api/conversations.replies?channel&ts&limit&cursor
//     &include_all_metadata → {"ok":true,"messages":[parent, replies…],
//     "has_more","response_metadata":{"next_cursor"}}, oldest first, at most
//     MaxReplies a page whatever limit asks; metadata only with
//     include_all_metadata=true
package slacktest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"ticketrelay/delivery/downstream/downstreamtest"
)

// Fake is one workspace with one incoming webhook.
type Fake struct {
	Faults      downstreamtest.Faults // of hook posts
	ReplyFaults downstreamtest.Faults // of chat.postMessage
	hook        string                // /services/T000/B000/secret
	srv         string

	mu       sync.Mutex
	archived bool
	messages []string
	threads  map[string][]Reply // channel/ts of a parent → its replies
	ts       int64              // the last ts's microseconds
}

// Reply is one reply in a thread.
type Reply struct {
	TS     string
	Text   string
	Marker string // metadata event_payload.marker, "" without metadata
}

// BotToken is the bot token the Web API accepts; Channel the one channel.
const (
	BotToken = "xoxb-0000-test-token"
	Channel  = "C0123ABCD"
)

// MaxReplies is the most messages a conversations.replies page holds.
const MaxReplies = 200

// HookPath is the path of the fake's incoming webhook.
const HookPath = "/services/T0000TEAM/B0000HOOK/s3cr3tTokenValue0000"

// New starts the workspace.
func New(t testing.TB) *Fake {
	f := &Fake{hook: HookPath, threads: map[string][]Reply{}, ts: 1700000000_000000}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /api/chat.postMessage", func(w http.ResponseWriter, r *http.Request) {
		f.ReplyFaults.Serve(w, r, f.web(f.postMessage))
	})
	mux.HandleFunc("GET /api/conversations.replies", f.web(f.replies))
	mux.HandleFunc("POST /services/{team}/{bot}/{secret}", func(w http.ResponseWriter, r *http.Request) {
		f.Faults.Serve(w, r, f.post)
	})
	f.srv = downstreamtest.StartServer(t, mux).URL
	return f
}

// URL is the incoming webhook's URL.
func (f *Fake) URL() string { return f.srv + f.hook }

// WrongSecretURL is the hook's URL with another secret.
func (f *Fake) WrongSecretURL() string {
	return f.srv + f.hook[:strings.LastIndex(f.hook, "/")] + "/revoked"
}

// Archive archives the hook's channel: posts answer 410 channel_is_archived.
func (f *Fake) Archive() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.archived = true
}

// Count is the number of messages posted.
func (f *Fake) Count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.messages)
}

// Messages returns the posted texts.
func (f *Fake) Messages() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.messages...)
}

func text(w http.ResponseWriter, status int, s string) {
	w.Header().Set("Content-Type", "text/html")
	w.WriteHeader(status)
	io.WriteString(w, s)
}

func (f *Fake) post(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	switch {
	case r.URL.Path == f.hook:
	case strings.HasPrefix(r.URL.Path, f.hook[:strings.LastIndex(f.hook, "/")+1]):
		text(w, http.StatusForbidden, "invalid_token")
		return
	default:
		text(w, http.StatusNotFound, "no_service")
		return
	}
	var m struct {
		Text   string `json:"text"`
		Blocks []any  `json:"blocks"`
	}
	if err := json.Unmarshal(body, &m); err != nil {
		text(w, http.StatusBadRequest, "invalid_payload")
		return
	}
	if strings.TrimSpace(m.Text) == "" && len(m.Blocks) == 0 {
		text(w, http.StatusBadRequest, "no_text")
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.archived {
		text(w, http.StatusGone, "channel_is_archived")
		return
	}
	f.messages = append(f.messages, m.Text)
	text(w, http.StatusOK, "ok")
}

// APIURL is the Web API's base URL.
func (f *Fake) APIURL() string { return f.srv + "/api" }

func (f *Fake) nextTS() string {
	f.ts++
	return fmt.Sprintf("%d.%06d", f.ts/1e6, f.ts%1e6)
}

// AddParent posts a message in Channel (as the hook would) and returns
// its ts.
func (f *Fake) AddParent(text string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	ts := f.nextTS()
	f.messages = append(f.messages, text)
	f.threads[Channel+"/"+ts] = []Reply{}
	return ts
}

// AddReplies adds n replies by someone else to the thread of ts.
func (f *Fake) AddReplies(ts string, n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := range n {
		f.threads[Channel+"/"+ts] = append(f.threads[Channel+"/"+ts], Reply{TS: f.nextTS(), Text: fmt.Sprintf("reply %d", i+1)})
	}
}

// Replies returns the replies in the thread of ts.
func (f *Fake) Replies(ts string) []Reply {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.threads[Channel+"/"+ts])
}

func webError(w http.ResponseWriter, e string) {
	downstreamtest.WriteJSON(w, http.StatusOK, map[string]any{"ok": false, "error": e})
}

func (f *Fake) web(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+BotToken {
			webError(w, "invalid_auth")
			return
		}
		h(w, r)
	}
}

func (f *Fake) postMessage(w http.ResponseWriter, r *http.Request) {
	var in struct {
		Channel  string `json:"channel"`
		ThreadTS string `json:"thread_ts"`
		Text     string `json:"text"`
		Metadata *struct {
			EventType    string `json:"event_type"`
			EventPayload struct {
				Marker string `json:"marker"`
			} `json:"event_payload"`
		} `json:"metadata"`
	}
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
		webError(w, "invalid_json")
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case in.Channel != Channel:
		webError(w, "channel_not_found")
		return
	case strings.TrimSpace(in.Text) == "":
		webError(w, "no_text")
		return
	}
	key := in.Channel + "/" + in.ThreadTS
	if _, ok := f.threads[key]; !ok {
		webError(w, "thread_not_found")
		return
	}
	rp := Reply{TS: f.nextTS(), Text: in.Text}
	if in.Metadata != nil {
		rp.Marker = in.Metadata.EventPayload.Marker
	}
	f.threads[key] = append(f.threads[key], rp)
	downstreamtest.WriteJSON(w, http.StatusOK, map[string]any{"ok": true, "channel": in.Channel, "ts": rp.TS,
		"message": map[string]any{"type": "message", "text": rp.Text, "ts": rp.TS, "thread_ts": in.ThreadTS}})
}

func (f *Fake) replies(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit, err := strconv.Atoi(q.Get("limit"))
	if err != nil || limit <= 0 || limit > MaxReplies {
		limit = MaxReplies
	}
	start, _ := strconv.Atoi(q.Get("cursor"))
	f.mu.Lock()
	defer f.mu.Unlock()
	if q.Get("channel") != Channel {
		webError(w, "channel_not_found")
		return
	}
	thread, ok := f.threads[q.Get("channel")+"/"+q.Get("ts")]
	if !ok {
		webError(w, "thread_not_found")
		return
	}
	all := []map[string]any{{"type": "message", "ts": q.Get("ts"), "text": "parent", "reply_count": len(thread)}}
	for _, rp := range thread {
		m := map[string]any{"type": "message", "ts": rp.TS, "text": rp.Text, "thread_ts": q.Get("ts")}
		if rp.Marker != "" && q.Get("include_all_metadata") == "true" {
			m["metadata"] = map[string]any{"event_type": "ticketrelay_comment", "event_payload": map[string]string{"marker": rp.Marker}}
		}
		all = append(all, m)
	}
	start = min(max(start, 0), len(all))
	end := min(start+limit, len(all))
	next := ""
	if end < len(all) {
		next = strconv.Itoa(end)
	}
	downstreamtest.WriteJSON(w, http.StatusOK, map[string]any{"ok": true, "messages": all[start:end], "has_more": next != "",
		"response_metadata": map[string]string{"next_cursor": next}})
}
