// Package slacktest is an httptest fake of a Slack workspace's incoming
// webhooks, keeping their documented contract: POST JSON to
// /services/T…/B…/secret → 200 "ok" (text body); errors are plain strings
// with a status: 400 invalid_payload or no_text, 403 invalid_token (right
// hook, wrong secret), 404 no_service (no such hook), 410
// channel_is_archived. Nothing dedupes: every accepted post is a message.
package slacktest

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"ticketrelay/downstream/downstreamtest"
)

// Fake is one workspace with one incoming webhook.
type Fake struct {
	Faults downstreamtest.Faults
	hook   string // /services/T000/B000/secret
	srv    string

	mu       sync.Mutex
	archived bool
	messages []string
}

// HookPath is the path of the fake's incoming webhook.
const HookPath = "/services/T0000TEAM/B0000HOOK/s3cr3tTokenValue0000"

// New starts the workspace.
func New(t testing.TB) *Fake {
	f := &Fake{hook: HookPath}
	mux := http.NewServeMux()
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
