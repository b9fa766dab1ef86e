// Package github opens GitHub issues (POST /repos/{owner}/{repo}/issues).
//
// GitHub takes no dedupe key. Each issue carries a label derived from the
// key, and Find lists the repository's issues filtered by that label — the
// issues list is read-after-write, unlike the search API, which lags — so
// an attempt of unknown outcome is reconciled before any resend. Labels on
// a new issue need push (triage) access: without it GitHub drops them
// silently, and Find could not see the issue.
package github

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"ticketrelay/downstream"
	"ticketrelay/downstream/internal/rest"
)

// DefaultBaseURL is the REST API host.
const DefaultBaseURL = "https://api.github.com"

// APIVersion is sent as X-GitHub-Api-Version.
const APIVersion = "2022-11-28"

// Capabilities: no key; a consistent lookup through the label filter.
var Capabilities = downstream.Capabilities{Lookup: downstream.LookupConsistent}

// Config configures one GitHub target.
type Config struct {
	Name string
	// BaseURL of the REST API (default DefaultBaseURL; GHES: https://HOST/api/v3).
	BaseURL     string
	Owner, Repo string
	// Token is a token with issues:write (and push or triage access, so
	// that labels are kept).
	Token downstream.Secret
	// HTTP is the client (nil: a client with a 20s timeout).
	HTTP *http.Client
	// Now is the clock (nil: time.Now), for x-ratelimit-reset.
	Now func() time.Time
}

// Target opens issues in one repository.
type Target struct {
	cfg  Config
	repo string // base + /repos/{owner}/{repo}
	c    *rest.Client
}

var (
	_ downstream.Target = (*Target)(nil)
	_ downstream.Finder = (*Target)(nil)
)

// New validates cfg and builds the target.
func New(cfg Config) (*Target, error) {
	if cfg.BaseURL == "" {
		cfg.BaseURL = DefaultBaseURL
	}
	base, err := rest.BaseURL("github", cfg.Name, cfg.BaseURL, "")
	if err != nil {
		return nil, err
	}
	if cfg.Owner == "" || cfg.Repo == "" || strings.ContainsAny(cfg.Owner+cfg.Repo, "/ ") {
		return nil, fmt.Errorf("github %q: owner and repo are required (e.g. owner: acme, repo: support)", cfg.Name)
	}
	if cfg.Token.IsZero() {
		return nil, fmt.Errorf("github %q: a token is required", cfg.Name)
	}
	return &Target{cfg: cfg, repo: base + "/repos/" + url.PathEscape(cfg.Owner) + "/" + url.PathEscape(cfg.Repo),
		c: rest.NewClient(cfg.HTTP, cfg.Now)}, nil
}

// Name implements downstream.Target.
func (t *Target) Name() string { return t.cfg.Name }

// Capabilities implements downstream.Target.
func (t *Target) Capabilities() downstream.Capabilities { return Capabilities }

// KeyLabel is the label that marks the issue of a dedupe key (GitHub labels
// hold at most 50 characters; the key may hold 255).
func KeyLabel(key string) string {
	sum := sha256.Sum256([]byte(key))
	return "ticketrelay-" + hex.EncodeToString(sum[:12])
}

type issue struct {
	Number      int64           `json:"number"`
	HTMLURL     string          `json:"html_url"`
	PullRequest json.RawMessage `json:"pull_request"`
}

// Deliver opens the issue.
func (t *Target) Deliver(ctx context.Context, d downstream.Delivery) (downstream.Receipt, error) {
	labels := append([]string{KeyLabel(d.Key)}, d.Ticket.Labels...)
	body := d.Ticket.Body
	if d.Ticket.Priority != "" {
		body = strings.TrimRight(body, "\n") + "\n\n---\npriority: " + d.Ticket.Priority + " · ticket " + d.Ticket.ID
	}
	req, err := rest.NewJSONRequest(ctx, http.MethodPost, t.repo+"/issues", map[string]any{
		"title": d.Ticket.Title, "body": body, "labels": labels,
	})
	if err != nil {
		return downstream.Receipt{}, err
	}
	var is issue
	if err := t.call(req, &is); err != nil {
		return downstream.Receipt{}, err
	}
	return receipt(is), nil
}

// Find lists issues (any state) carrying the key's label.
func (t *Target) Find(ctx context.Context, d downstream.Delivery) (downstream.Receipt, bool, error) {
	q := url.Values{"labels": {KeyLabel(d.Key)}, "state": {"all"}, "per_page": {"10"}, "sort": {"created"}, "direction": {"asc"}}
	req, err := rest.NewJSONRequest(ctx, http.MethodGet, t.repo+"/issues?"+q.Encode(), nil)
	if err != nil {
		return downstream.Receipt{}, false, err
	}
	var list []issue
	if err := t.call(req, &list); err != nil {
		return downstream.Receipt{}, false, err
	}
	for _, is := range list {
		if len(is.PullRequest) == 0 || string(is.PullRequest) == "null" { // the list includes pull requests
			return receipt(is), true, nil
		}
	}
	return downstream.Receipt{}, false, nil
}

func receipt(is issue) downstream.Receipt {
	return downstream.Receipt{ExternalID: strconv.FormatInt(is.Number, 10), URL: is.HTMLURL}
}

func (t *Target) call(req *http.Request, out any) error {
	req.Header.Set("Accept", "application/vnd.github+json")
	req.Header.Set("X-GitHub-Api-Version", APIVersion)
	req.Header.Set("Authorization", "Bearer "+t.cfg.Token.Reveal())
	resp, err := t.c.Do(req)
	if err != nil {
		return err
	}
	if !resp.OK() {
		return t.fail(resp)
	}
	if err := resp.JSON(out); err != nil {
		return &downstream.Error{Class: downstream.Transient, MayHaveActed: true, StatusCode: resp.Status, Err: err}
	}
	return nil
}

// fail translates an error answer. GitHub answers a rate limit with 403 or
// 429: primary (x-ratelimit-remaining: 0; wait until x-ratelimit-reset, epoch
// seconds) or secondary (the message says so; wait retry-after seconds, else
// at least a minute). Those are transient, not auth errors.
func (t *Target) fail(r *rest.Response) *downstream.Error {
	var ans struct {
		Message string `json:"message"`
		Errors  []struct {
			Resource, Field, Code, Message string
		} `json:"errors"`
	}
	msg := rest.Message(r)
	if json.Unmarshal(r.Body, &ans) == nil && ans.Message != "" {
		msg = ans.Message
		for _, e := range ans.Errors {
			switch {
			case e.Message != "":
				msg += "; " + e.Message
			case e.Field != "":
				msg += fmt.Sprintf("; %s.%s: %s", e.Resource, e.Field, e.Code)
			}
		}
	}
	e := t.c.Fail(r, msg)
	if r.Status != http.StatusForbidden && r.Status != http.StatusTooManyRequests {
		return e
	}
	primary := r.Header.Get("x-ratelimit-remaining") == "0"
	secondary := strings.Contains(strings.ToLower(ans.Message), "secondary rate limit")
	if !primary && !secondary && r.Header.Get("Retry-After") == "" && r.Status == http.StatusForbidden {
		return e // a real permission problem
	}
	e.Class, e.MayHaveActed = downstream.Transient, false
	if e.RetryAfter == 0 && primary {
		if reset, err := strconv.ParseInt(r.Header.Get("x-ratelimit-reset"), 10, 64); err == nil {
			e.RetryAfter = max(time.Unix(reset, 0).Sub(t.c.Now()), 0)
		}
	}
	if e.RetryAfter == 0 && secondary {
		e.RetryAfter = time.Minute
	}
	return e
}
