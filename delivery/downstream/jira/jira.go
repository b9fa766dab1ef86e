// Package jira creates Jira Cloud issues (POST /rest/api/3/issue).
//
// Jira takes no dedupe key. Each issue carries a label derived from the key
// and Find runs JQL on it (POST /rest/api/3/search/jql), but that search is
// eventually consistent: a just-created issue may be missing for seconds to
// minutes, so "not found" proves nothing. The target declares
// LookupEventual: the forwarder never resends an attempt of unknown outcome
// and marks it uncertain instead.
package jira

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"

	"ticketrelay/delivery/downstream"
	"ticketrelay/delivery/downstream/internal/rest"
	"ticketrelay/ticket"
)

// Capabilities: no key; an eventually consistent lookup.
var Capabilities = downstream.Capabilities{Lookup: downstream.LookupEventual}

// MaxSummary is Jira's limit on an issue summary, in characters.
const MaxSummary = 255

// Config configures one Jira target.
type Config struct {
	Name string
	// BaseURL is the site, e.g. https://acme.atlassian.net.
	BaseURL string
	// Email and Token authenticate with an API token (basic auth).
	Email string
	Token downstream.Secret
	// Project is the project key, e.g. OPS.
	Project string
	// IssueType is the issue type name (default "Task").
	IssueType string
	// Fields are fixed values of other fields, sent with every create
	// (see ParseFields).
	Fields map[string]json.RawMessage
	// PriorityNames maps ticket priorities (low, normal, high, urgent) to
	// Jira priority names for updates; one not in it gets
	// DefaultPriorityNames' (Jira's default scheme).
	PriorityNames map[string]string
	downstream.HTTPConfig
}

// Target creates issues in one project.
type Target struct {
	cfg Config
	api rest.API
}

var (
	_ downstream.Target = (*Target)(nil)
	_ downstream.Finder = (*Target)(nil)
)

// New validates cfg and builds the target.
func New(cfg Config) (*Target, error) {
	api, err := rest.NewAPI("jira", cfg.Name, cfg.BaseURL, "https://acme.atlassian.net", cfg.HTTPConfig, cfg.Token)
	if err != nil {
		return nil, err
	}
	if cfg.Email == "" || cfg.Token.IsZero() {
		return nil, fmt.Errorf("jira %q: email and API token are required", cfg.Name)
	}
	if cfg.Project == "" || strings.ContainsAny(cfg.Project, `" `) {
		return nil, fmt.Errorf("jira %q: a project key is required (e.g. project: OPS)", cfg.Name)
	}
	for p, n := range cfg.PriorityNames {
		if !slices.Contains(ticket.Priorities, p) || strings.TrimSpace(n) == "" {
			return nil, fmt.Errorf("jira %q: priority_names maps %q to %q; want one of %s mapped to a Jira priority name",
				cfg.Name, p, n, strings.Join(ticket.Priorities, ", "))
		}
	}
	for name := range cfg.Fields {
		if slices.Contains(Managed, name) {
			return nil, fmt.Errorf("jira %q: field %q is filled from the ticket; it cannot be fixed", cfg.Name, name)
		}
	}
	if cfg.IssueType == "" {
		cfg.IssueType = "Task"
	}
	return &Target{cfg: cfg, api: api}, nil
}

// Name implements downstream.Target.
func (t *Target) Name() string { return t.cfg.Name }

// Capabilities implements downstream.Target.
func (t *Target) Capabilities() downstream.Capabilities { return Capabilities }

// KeyLabel is the label that marks the issue of a dedupe key.
func KeyLabel(key string) string {
	sum := sha256.Sum256([]byte(key))
	return "ticketrelay-" + hex.EncodeToString(sum[:12])
}

// Deliver creates the issue.
func (t *Target) Deliver(ctx context.Context, d downstream.Delivery) (downstream.Receipt, error) {
	labels := []string{KeyLabel(d.Key)}
	for _, l := range d.Ticket.Labels {
		labels = append(labels, strings.ReplaceAll(l, " ", "_")) // Jira labels hold no spaces
	}
	summary, _ := downstream.Shorten(d.Ticket.Title, MaxSummary)
	fields := map[string]any{
		"project":   map[string]string{"key": t.cfg.Project},
		"issuetype": map[string]string{"name": t.cfg.IssueType},
		"summary":   summary,
		"labels":    labels,
	}
	for name, v := range t.cfg.Fields {
		fields[name] = v
	}
	maps.Copy(fields, ticketFields(d.Ticket.TargetFields())) // the tool's: its project or issue type wins over the target's
	text := strings.TrimSpace(d.Ticket.Body)
	if text != "" {
		text += "\n\n"
	}
	text += "priority: " + d.Ticket.Priority + " · ticket " + d.Ticket.ID
	fields["description"] = ADF(text)
	req, err := rest.NewJSONRequest(ctx, http.MethodPost, t.api.Base+"/rest/api/3/issue", map[string]any{"fields": fields})
	if err != nil {
		return downstream.Receipt{}, err
	}
	var ans struct{ ID, Key string }
	if err := t.call(req, &ans); err != nil {
		return downstream.Receipt{}, err
	}
	if ans.Key == "" {
		return downstream.Receipt{}, &downstream.Error{Class: downstream.Transient, MayHaveActed: true, Err: fmt.Errorf("jira answered without an issue key")}
	}
	return t.receipt(ans.Key), nil
}

// jqlQuote escapes a value for a quoted JQL string: a project key a
// caller gave cannot end the string.
var jqlQuote = strings.NewReplacer(`\`, `\\`, `"`, `\"`)

// Find searches for the key's label. Not finding it proves nothing (the
// search index lags).
func (t *Target) Find(ctx context.Context, d downstream.Delivery) (downstream.Receipt, bool, error) {
	project := t.cfg.Project
	if p, ok := downstream.FieldString(d.Ticket.TargetFields(), "project"); ok {
		project = p // the tool files into its own project
	}
	jql := fmt.Sprintf(`project = "%s" AND labels = "%s" ORDER BY created ASC`, jqlQuote.Replace(project), KeyLabel(d.Key))
	req, err := rest.NewJSONRequest(ctx, http.MethodPost, t.api.Base+"/rest/api/3/search/jql", map[string]any{
		"jql": jql, "fields": []string{"summary"}, "maxResults": 1,
	})
	if err != nil {
		return downstream.Receipt{}, false, err
	}
	var ans struct {
		Issues []struct{ ID, Key string } `json:"issues"`
	}
	if err := t.call(req, &ans); err != nil {
		return downstream.Receipt{}, false, err
	}
	if len(ans.Issues) == 0 {
		return downstream.Receipt{}, false, nil
	}
	return t.receipt(ans.Issues[0].Key), true, nil
}

func (t *Target) receipt(key string) downstream.Receipt {
	return downstream.Receipt{ExternalID: key, URL: t.api.Base + "/browse/" + key}
}

func (t *Target) call(req *http.Request, out any) error {
	req.Header.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(t.cfg.Email+":"+t.cfg.Token.Reveal())))
	resp, err := t.api.Do(req)
	if err != nil {
		return err
	}
	if !resp.OK() {
		return t.api.Fail(resp, message(resp))
	}
	if out == nil {
		return nil // an update or a transition: 204 No Content
	}
	return resp.Result(out)
}

// message renders {"errorMessages": [...], "errors": {"field": "message"}}.
func message(r *rest.Response) string {
	var e struct {
		ErrorMessages []string          `json:"errorMessages"`
		Errors        map[string]string `json:"errors"`
	}
	if json.Unmarshal(r.Body, &e) != nil || len(e.ErrorMessages)+len(e.Errors) == 0 {
		return rest.Message(r)
	}
	parts := slices.Clone(e.ErrorMessages)
	for _, f := range slices.Sorted(maps.Keys(e.Errors)) {
		parts = append(parts, f+": "+e.Errors[f])
	}
	return strings.Join(parts, "; ")
}

// ADF renders plain text as an Atlassian Document: one paragraph per block
// of text between blank lines, hard breaks between its lines.
func ADF(text string) map[string]any {
	paras := []any{}
	for _, block := range strings.Split(strings.ReplaceAll(text, "\r\n", "\n"), "\n\n") {
		var content []any
		for _, line := range strings.Split(block, "\n") {
			if line == "" {
				continue // ADF text nodes must not be empty
			}
			if len(content) > 0 {
				content = append(content, map[string]string{"type": "hardBreak"})
			}
			content = append(content, map[string]string{"type": "text", "text": line})
		}
		if len(content) > 0 {
			paras = append(paras, map[string]any{"type": "paragraph", "content": content})
		}
	}
	return map[string]any{"type": "doc", "version": 1, "content": paras}
}
