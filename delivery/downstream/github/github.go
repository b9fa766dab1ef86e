// Package github opens GitHub issues (POST /repos/{owner}/{repo}/issues).
//
// GitHub takes no dedupe key. Each issue carries a label derived from the
// key, and Find lists the repository's issues filtered by that label — the
// issues list is read-after-write, unlike the search API, which lags — so
// an attempt of unknown outcome is reconciled before any resend.
//
// Labels on a new issue are kept only for a token with push access ("Labels
// are silently dropped otherwise", create-an-issue documentation); without
// the key label Find could never see the issue, and a lost answer would
// become a second issue. So before its first create a Target checks the
// token's permissions on the repository (GET /repos/{owner}/{repo}) and
// refuses to create anything without push access; a GitHub App installation
// token, for which that answer says nothing, is recognised by
// GET /installation/repositories. A created issue that lacks the key label
// all the same stops the target: later deliveries fail permanently.
//
// GitHub's limits are kept: titles of at most 256 characters (a longer title
// is cut and the full one opens the body), label names of at most 50
// (a longer label is shortened to a unique name), bodies of at most 65536.
package github

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"ticketrelay/delivery/downstream"
	"ticketrelay/delivery/downstream/internal/rest"
	"ticketrelay/ticket"
)

// DefaultBaseURL is the REST API host.
const DefaultBaseURL = "https://api.github.com"

// APIVersion is sent as X-GitHub-Api-Version.
const APIVersion = "2022-11-28"

// GitHub's limits, in characters.
const (
	MaxTitle = 256
	MaxLabel = 50
	MaxBody  = 65536
)

// SecondaryWait is how long to wait after a secondary rate limit that names
// no time ("wait for at least one minute before retrying").
const SecondaryWait = time.Minute

// Capabilities: no key; a consistent lookup through the label filter.
var Capabilities = downstream.Capabilities{Lookup: downstream.LookupConsistent}

// Config configures one GitHub target.
type Config struct {
	Name string
	// BaseURL of the REST API (default DefaultBaseURL; GHES: https://HOST/api/v3).
	BaseURL     string
	Owner, Repo string
	// Token is a token with issues:write whose user has push (write)
	// access to the repository, or a GitHub App installation token with
	// issues write: labels are kept only for those.
	Token downstream.Secret
	downstream.HTTPConfig
}

// Target opens issues in one repository.
type Target struct {
	cfg  Config
	repo string // base + /repos/{owner}/{repo}
	api  rest.API

	check chan struct{} // held while the token's permissions are checked

	mu       sync.Mutex
	verified bool  // the token may set labels on a new issue
	dropped  error // GitHub dropped the labels of an issue: no more creates
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
	api, err := rest.NewAPI("github", cfg.Name, cfg.BaseURL, "", cfg.HTTPConfig, cfg.Token)
	if err != nil {
		return nil, err
	}
	if cfg.Owner == "" || cfg.Repo == "" || strings.ContainsAny(cfg.Owner+cfg.Repo, "/ ") {
		return nil, fmt.Errorf("github %q: owner and repo are required (e.g. owner: acme, repo: support)", cfg.Name)
	}
	if cfg.Token.IsZero() {
		return nil, fmt.Errorf("github %q: a token is required", cfg.Name)
	}
	repo := api.Base + "/repos/" + url.PathEscape(cfg.Owner) + "/" + url.PathEscape(cfg.Repo)
	return &Target{cfg: cfg, api: api, repo: repo, check: make(chan struct{}, 1)}, nil
}

// Name implements downstream.Target.
func (t *Target) Name() string { return t.cfg.Name }

// Capabilities implements downstream.Target.
func (t *Target) Capabilities() downstream.Capabilities { return Capabilities }

// Workers implements downstream.Parallel. GitHub asks integrators to avoid
// concurrent requests (its secondary rate limits count them), so its calls
// in flight stay at 16, where every API started before the limit could
// climb (decision 0063), and do not probe toward the forwarder's 64. Fewer
// would let one slow call hold up every other issue; the pace GitHub
// allows for creating content is the target's rate_limit, and its 403/429
// answers pause the target.
func (t *Target) Workers() int { return 16 }

var _ downstream.Parallel = (*Target)(nil)

// KeyLabel is the label that marks the issue of a dedupe key (GitHub labels
// hold at most 50 characters; the key may hold 255). Its prefix is
// reserved: ticket.Normalize refuses a caller's label that starts with it.
func KeyLabel(key string) string {
	sum := sha256.Sum256([]byte(key))
	return ticket.ReservedLabelPrefix + hex.EncodeToString(sum[:12])
}

// Label fits a ticket label into GitHub's 50 characters: a longer one
// becomes its first 41 characters, "-" and 8 hex digits of the SHA-256 of
// the whole label, so that two long labels never share a name.
func Label(l string) string {
	r := []rune(l)
	if len(r) <= MaxLabel {
		return l
	}
	sum := sha256.Sum256([]byte(l))
	return string(r[:MaxLabel-9]) + "-" + hex.EncodeToString(sum[:4])
}

type issue struct {
	Number      int64             `json:"number"`
	HTMLURL     string            `json:"html_url"`
	Body        string            `json:"body"`
	PullRequest json.RawMessage   `json:"pull_request"`
	Labels      []json.RawMessage `json:"labels"` // {"name": ...} objects (or names)
}

// labelNames are the names of the issue's labels.
func (is issue) labelNames() []string {
	var out []string
	for _, raw := range is.Labels {
		var l struct {
			Name string `json:"name"`
		}
		if json.Unmarshal(raw, &l) != nil {
			json.Unmarshal(raw, &l.Name)
		}
		out = append(out, l.Name)
	}
	return out
}

// hasLabel reports whether the issue carries the label (names compare
// without case, as GitHub's do).
func (is issue) hasLabel(name string) bool {
	return slices.ContainsFunc(is.labelNames(), func(l string) bool { return strings.EqualFold(l, name) })
}

// Deliver opens the issue.
func (t *Target) Deliver(ctx context.Context, d downstream.Delivery) (downstream.Receipt, error) {
	if err := t.ensureLabels(ctx); err != nil {
		return downstream.Receipt{}, err
	}
	key := KeyLabel(d.Key)
	labels := []string{key}
	shortened := false
	for _, l := range d.Ticket.Labels {
		gl := Label(l)
		shortened = shortened || gl != l
		if !slices.Contains(labels, gl) {
			labels = append(labels, gl)
		}
	}
	fields := d.Ticket.TargetFields()
	for _, l := range downstream.FieldStrings(fields, "labels") {
		if gl := Label(l); !slices.Contains(labels, gl) {
			labels = append(labels, gl)
		}
	}
	title, body := texts(d, shortened)
	in := map[string]any{"title": title, "body": body, "labels": labels}
	for _, name := range []string{"assignees", "milestone", "type"} {
		if v, ok := fields[name]; ok {
			in[name] = v
		}
	}
	req, err := rest.NewJSONRequest(ctx, http.MethodPost, t.repo+"/issues", in)
	if err != nil {
		return downstream.Receipt{}, err
	}
	var is issue
	if err := t.call(req, &is); err != nil {
		return downstream.Receipt{}, err
	}
	r := receipt(is)
	if !is.hasLabel(key) {
		// The issue exists and we know it: it is delivered. But no lookup
		// will ever find an issue of this token again, and a lost answer
		// would become a duplicate: create nothing more.
		t.mu.Lock()
		if t.dropped == nil {
			t.dropped = &downstream.Error{Class: downstream.Permanent, Err: fmt.Errorf(
				"github %q: the token cannot set labels on %s/%s: GitHub dropped the labels of issue #%d (%s), and without its key label "+
					"an issue cannot be found again after a lost answer; nothing more is created through this target: give the token "+
					"push (write) access to the repository (or issues write to the GitHub App), then restart the dispatcher",
				t.cfg.Name, t.cfg.Owner, t.cfg.Repo, is.Number, r.URL)}
		}
		t.mu.Unlock()
	}
	return r, nil
}

// texts renders the title (cut to MaxTitle characters; the full title then
// opens the body) and the body (the ticket's, cut if the whole would pass
// MaxBody, and a footer with the priority, the ticket id and, when some
// were shortened, the full labels).
func texts(d downstream.Delivery, shortened bool) (title, body string) {
	title, cut := downstream.Shorten(d.Ticket.Title, MaxTitle)
	var head string
	if cut {
		head = d.Ticket.Title + "\n\n"
	}
	foot := "\n\n---\n"
	if d.Ticket.Priority != "" {
		foot += "priority: " + d.Ticket.Priority + " · "
	}
	foot += footerMark(d)
	if shortened {
		foot += " · labels: " + strings.Join(d.Ticket.Labels, ", ")
	}
	text := strings.TrimRight(d.Ticket.Body, "\n")
	room := MaxBody - utf8.RuneCountInString(head) - utf8.RuneCountInString(foot)
	if utf8.RuneCountInString(text) > room {
		const cut = "\n\n… (the rest of the ticket's text is cut: GitHub takes 65536 characters)"
		text = string([]rune(text)[:room-utf8.RuneCountInString(cut)]) + cut
	}
	return title, head + text + foot
}

// Find lists issues (any state) carrying the key's label, and takes the
// first whose body holds the ticket's footer (see texts). The label alone
// is no proof: anyone who may label issues can put it on another. An issue
// with the label but without the footer (forged, or its body edited) is
// neither proof that the ticket was delivered nor that it was not: a
// permanent error, which leaves the decision to an operator.
func (t *Target) Find(ctx context.Context, d downstream.Delivery) (downstream.Receipt, bool, error) {
	q := url.Values{"labels": {KeyLabel(d.Key)}, "state": {"all"}, "per_page": {"10"}, "sort": {"created"}, "direction": {"asc"}}
	var list []issue
	if err := t.get(ctx, t.repo+"/issues?"+q.Encode(), &list); err != nil {
		return downstream.Receipt{}, false, err
	}
	var suspect *issue
	for i, is := range list {
		if len(is.PullRequest) != 0 && string(is.PullRequest) != "null" { // the list includes pull requests
			continue
		}
		if strings.Contains(is.Body, footerMark(d)) {
			return receipt(is), true, nil
		}
		if suspect == nil {
			suspect = &list[i]
		}
	}
	if suspect != nil {
		return downstream.Receipt{}, false, &downstream.Error{Class: downstream.Permanent, Err: fmt.Errorf(
			"github %q: issue #%d (%s) carries the key label %s but its body lacks the footer of ticket %s: it was edited, or the label "+
				"was put on an issue of another origin; whether this request was delivered is unknown: check the issue, then resolve the request",
			t.cfg.Name, suspect.Number, rest.Clean(suspect.HTMLURL), KeyLabel(d.Key), d.Ticket.ID)}
	}
	return downstream.Receipt{}, false, nil
}

// footerMark is the part of the footer texts writes that names the ticket.
func footerMark(d downstream.Delivery) string { return "ticket " + d.Ticket.ID }

func receipt(is issue) downstream.Receipt {
	return downstream.Receipt{ExternalID: strconv.FormatInt(is.Number, 10), URL: is.HTMLURL}
}
