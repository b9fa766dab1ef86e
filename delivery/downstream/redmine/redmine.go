// Package redmine creates Redmine issues (POST /issues.json, REST API).
//
// Redmine takes no dedupe key. The key goes into a custom field of the
// issue (Config.CustomFieldID), or, with none configured, into a marker at
// the end of the subject. Find filters the project's issues on it
// (GET /issues.json with explicit f[]/op[]/v[] filters). Redmine's issue
// filters are SQL queries on the database the create wrote to, so the
// lookup is read-after-write: "not found" after an attempt that has ended
// proves the attempt created nothing, and the forwarder may create the
// issue again. That is what this target declares (LookupConsistent).
//
// Redmine 5 is lenient where a lookup must not be:
//   - a custom field that is unknown, not enabled for the project or the
//     tracker, or not visible to the API user is dropped from a create
//     without an error. Deliver checks that the created issue holds the key
//     and fails loudly otherwise: every later lookup would miss the issue;
//   - a filter Redmine does not offer is ignored without an error, and the
//     list comes back unfiltered: a filter on a custom field that is not
//     "Used as a filter" (is_filter), not enabled for the project, not
//     visible to the API user, or unknown. Find then fails (an issue in the
//     answer that the filter would not have matched shows it was ignored)
//     instead of concluding "not found" from the first page of an
//     unfiltered list: that would let the forwarder create a second issue;
//   - a short filter (cf_1=value) reads a leading "!", "~", "*", … as an
//     operator and splits the value at "|". Find sends explicit filters and
//     keeps only issues that carry the key exactly;
//   - a tracker_id the project does not enable is replaced by the project's
//     first tracker, without an error.
package redmine

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"ticketrelay/delivery/downstream"
	"ticketrelay/delivery/downstream/internal/rest"
)

// Capabilities: no key; a consistent lookup through the issue filters.
var Capabilities = downstream.Capabilities{Lookup: downstream.LookupConsistent}

// MaxSubject is Redmine's limit on an issue subject, in characters.
const MaxSubject = 255

// APIKeyHeader carries the API key.
const APIKeyHeader = "X-Redmine-API-Key"

// Config configures one Redmine target.
type Config struct {
	Name string
	// BaseURL is the Redmine root, e.g. https://redmine.example.com (or
	// https://host/redmine under a sub-path).
	BaseURL string
	// APIKey is the API access key of the user issues are created as
	// (permissions: add and view issues in Project).
	APIKey downstream.Secret
	// Project is the project's identifier (e.g. "support") or numeric id.
	Project string
	// TrackerID is the tracker of new issues (0: the project's first).
	TrackerID int
	// PriorityIDs maps ticket priorities (low, normal, high, urgent) to
	// Redmine priority ids; a priority not in it gets Redmine's default.
	PriorityIDs map[string]int
	// CustomFieldID is the issue custom field (format string, "used as a
	// filter", enabled for the project and tracker) that holds the dedupe
	// key. 0: the key goes into a subject marker (see SubjectMarker).
	CustomFieldID int
	// OpenStatusID and ClosedStatusID are the statuses an update that
	// reopens or closes an issue sets (0: the first open and the first
	// closed status Redmine lists, New and Closed in its default data).
	OpenStatusID, ClosedStatusID int
	downstream.HTTPConfig
}

// Target creates issues in one project.
type Target struct {
	cfg      Config
	api      rest.API
	statuses statusCache
}

var (
	_ downstream.Target = (*Target)(nil)
	_ downstream.Finder = (*Target)(nil)
)

// New validates cfg and builds the target.
func New(cfg Config) (*Target, error) {
	api, err := rest.NewAPI("redmine", cfg.Name, cfg.BaseURL, "https://redmine.example.com", cfg.HTTPConfig, cfg.APIKey)
	if err != nil {
		return nil, err
	}
	if cfg.APIKey.IsZero() {
		return nil, fmt.Errorf("redmine %q: an API key is required", cfg.Name)
	}
	if cfg.Project == "" || strings.ContainsAny(cfg.Project, "/?#& ") {
		return nil, fmt.Errorf("redmine %q: a project identifier is required (e.g. project: support)", cfg.Name)
	}
	if cfg.TrackerID < 0 || cfg.CustomFieldID < 0 || cfg.OpenStatusID < 0 || cfg.ClosedStatusID < 0 {
		return nil, fmt.Errorf("redmine %q: tracker, custom field and status ids must be positive", cfg.Name)
	}
	for p, id := range cfg.PriorityIDs {
		if id <= 0 {
			return nil, fmt.Errorf("redmine %q: priority %q maps to id %d; ids are positive", cfg.Name, p, id)
		}
	}
	return &Target{cfg: cfg, api: api}, nil
}

// Name implements downstream.Target.
func (t *Target) Name() string { return t.cfg.Name }

// Capabilities implements downstream.Target.
func (t *Target) Capabilities() downstream.Capabilities { return Capabilities }

// SubjectMarker is the marker of a dedupe key in a subject, used when no
// custom field is configured: short (a key may hold 255 characters, a
// subject as many) and made of characters no filter treats specially. Its
// prefix is reserved: ticket.Normalize refuses a caller's title that holds
// it.
func SubjectMarker(key string) string { return downstream.Marker(key) }

type customValue struct {
	ID    int             `json:"id"`
	Value json.RawMessage `json:"value"`
}

type issue struct {
	ID           int64            `json:"id"`
	Subject      string           `json:"subject"`
	Description  string           `json:"description"`
	Tracker      struct{ ID int } `json:"tracker"`
	CustomFields []customValue    `json:"custom_fields"`
}

// holds reports whether is carries key (in the custom field, or the
// subject marker).
func (t *Target) holds(is issue, key string) bool {
	if t.cfg.CustomFieldID == 0 {
		return strings.Contains(is.Subject, SubjectMarker(key))
	}
	for _, cv := range is.CustomFields {
		var v string
		if cv.ID == t.cfg.CustomFieldID && json.Unmarshal(cv.Value, &v) == nil && v == key {
			return true
		}
	}
	return false
}

// Deliver creates the issue.
func (t *Target) Deliver(ctx context.Context, d downstream.Delivery) (downstream.Receipt, error) {
	subject, desc := t.texts(d)
	in := map[string]any{"project_id": t.cfg.Project, "subject": subject, "description": desc}
	if t.cfg.TrackerID != 0 {
		in["tracker_id"] = t.cfg.TrackerID
	}
	if id, ok := t.cfg.PriorityIDs[d.Ticket.Priority]; ok {
		in["priority_id"] = id
	}
	fields := d.Ticket.TargetFields()
	for _, name := range []string{"tracker_id", "assigned_to_id", "category_id", "fixed_version_id", "parent_issue_id"} {
		if v, ok := fields[name]; ok {
			in[name] = v // the tool's tracker wins over the target's
		}
	}
	var key []map[string]any
	if t.cfg.CustomFieldID != 0 {
		key = []map[string]any{{"id": t.cfg.CustomFieldID, "value": d.Key}}
	}
	if cf := downstream.CustomFields(fields, key...); len(cf) > 0 {
		in["custom_fields"] = cf
	}
	req, err := rest.NewJSONRequest(ctx, http.MethodPost, t.api.Base+"/issues.json", map[string]any{"issue": in})
	if err != nil {
		return downstream.Receipt{}, err
	}
	var ans struct {
		Issue issue `json:"issue"`
	}
	if err := t.call(req, &ans); err != nil {
		return downstream.Receipt{}, err
	}
	if ans.Issue.ID == 0 {
		return downstream.Receipt{}, &downstream.Error{Class: downstream.Transient, MayHaveActed: true,
			Err: fmt.Errorf("redmine answered without an issue id")}
	}
	r := t.receipt(ans.Issue.ID)
	if !t.holds(ans.Issue, d.Key) {
		// The issue exists, but no lookup will ever find it: a resend after
		// a lost answer would duplicate it. Stop here, loudly.
		return downstream.Receipt{}, &downstream.Error{Class: downstream.Permanent,
			Err: fmt.Errorf("redmine created issue #%d (%s) but did not keep the dedupe key in custom field %d: "+
				"enable the field for project %q and its tracker, make it visible to the API user and usable as a filter; "+
				"the issue exists: settle this request as delivered instead of redriving it", ans.Issue.ID, r.URL, t.cfg.CustomFieldID, t.cfg.Project)}
	}
	return r, nil
}

// texts renders the subject (cut to MaxSubject characters, the key's
// marker appended when no custom field holds it) and the description.
func (t *Target) texts(d downstream.Delivery) (subject, desc string) {
	limit := MaxSubject
	marker := ""
	if t.cfg.CustomFieldID == 0 {
		marker = " " + SubjectMarker(d.Key)
		limit -= len(marker) // ASCII: bytes are characters
	}
	title, cut := downstream.Shorten(d.Ticket.Title, limit)
	subject = title + marker

	var b strings.Builder
	if cut {
		b.WriteString(d.Ticket.Title + "\n\n")
	}
	if body := strings.TrimSpace(d.Ticket.Body); body != "" {
		b.WriteString(body + "\n\n")
	}
	b.WriteString("---\npriority: " + d.Ticket.Priority)
	if len(d.Ticket.Labels) > 0 {
		b.WriteString(" · labels: " + strings.Join(d.Ticket.Labels, ", "))
	}
	b.WriteString(" · " + footerMark(d))
	return subject, b.String()
}

// Find looks the key up among the project's issues, open or closed.
func (t *Target) Find(ctx context.Context, d downstream.Delivery) (downstream.Receipt, bool, error) {
	q := url.Values{
		"project_id":    {t.cfg.Project},
		"f[]":           {"status_id"},
		"op[status_id]": {"*"},
		"sort":          {"id"},
		"limit":         {"25"},
	}
	if cf := t.cfg.CustomFieldID; cf != 0 {
		f := "cf_" + strconv.Itoa(cf)
		q["f[]"] = append(q["f[]"], f)
		q.Set("op["+f+"]", "=")
		q.Set("v["+f+"][]", d.Key)
	} else {
		q["f[]"] = append(q["f[]"], "subject")
		q.Set("op[subject]", "~")
		q.Set("v[subject][]", SubjectMarker(d.Key))
	}
	req, err := rest.NewJSONRequest(ctx, http.MethodGet, t.api.Base+"/issues.json?"+q.Encode(), nil)
	if err != nil {
		return downstream.Receipt{}, false, err
	}
	var ans struct {
		Issues []issue `json:"issues"`
	}
	if err := t.call(req, &ans); err != nil {
		return downstream.Receipt{}, false, err
	}
	// Keep only what really carries the key, oldest first. Anything else
	// in the answer shows that Redmine ignored the filter (see the package
	// comment): the list is then the project's first issues, and the key's
	// issue may well exist beyond them. Not found would be a false proof.
	//
	// With the subject marker, a subject is no proof on its own (anyone who
	// may edit issues can write the marker): the issue must also hold the
	// description's footer (see texts). One that holds the marker but not
	// the footer (forged, or its description edited) proves neither
	// outcome: a permanent error, which leaves the decision to an operator.
	var stray, suspect *issue
	for i, is := range ans.Issues {
		if is.ID != 0 && t.holds(is, d.Key) {
			if t.cfg.CustomFieldID != 0 || strings.Contains(is.Description, footerMark(d)) {
				return t.receipt(is.ID), true, nil
			}
			if suspect == nil {
				suspect = &ans.Issues[i]
			}
			continue
		}
		if stray == nil && !t.filtered(is, d.Key) {
			stray = &ans.Issues[i]
		}
	}
	if stray != nil {
		return downstream.Receipt{}, false, &downstream.Error{Class: downstream.Transient, Err: t.ignoredFilter(stray.ID)}
	}
	if suspect != nil {
		return downstream.Receipt{}, false, &downstream.Error{Class: downstream.Permanent, Err: fmt.Errorf(
			"redmine issue #%d (%s) carries the key's subject marker %s but its description lacks the footer of ticket %s: it was edited, "+
				"or the marker was written into an issue of another origin; whether this request was delivered is unknown: check the issue, "+
				"then resolve the request", suspect.ID, t.receipt(suspect.ID).URL, SubjectMarker(d.Key), d.Ticket.ID)}
	}
	return downstream.Receipt{}, false, nil
}

// footerMark is the part of the description's footer (see texts) that
// names the ticket and the request.
func footerMark(d downstream.Delivery) string {
	return "ticket " + d.Ticket.ID + " · request " + d.Key
}

// filtered reports whether a lookup filter that Redmine applied could have
// listed is for key. It is looser than holds: depending on the database,
// Redmine compares a custom field's value without regard to case (and
// MySQL to trailing spaces), and "~" (contains) ignores case.
func (t *Target) filtered(is issue, key string) bool {
	if t.cfg.CustomFieldID == 0 {
		return strings.Contains(strings.ToLower(is.Subject), strings.ToLower(SubjectMarker(key)))
	}
	for _, cv := range is.CustomFields {
		var v string
		if cv.ID == t.cfg.CustomFieldID && json.Unmarshal(cv.Value, &v) == nil &&
			strings.EqualFold(strings.TrimRight(v, " "), strings.TrimRight(key, " ")) {
			return true
		}
	}
	return false
}

// ignoredFilter explains a lookup whose filter Redmine ignored.
func (t *Target) ignoredFilter(stray int64) error {
	if t.cfg.CustomFieldID == 0 {
		return fmt.Errorf("redmine ignored the lookup's subject filter: it listed issue #%d, whose subject lacks the key's marker; "+
			"the lookup cannot prove that an earlier attempt created nothing, so no new issue is created", stray)
	}
	return fmt.Errorf("redmine ignored the lookup's filter on custom field %d: it listed issue #%d, which does not carry the key; "+
		"tick \"Used as a filter\" on the custom field (Administration » Custom fields), and check that it is enabled for project %q "+
		"and its tracker and visible to the API user; until then the lookup cannot prove that an earlier attempt created nothing, "+
		"so no new issue is created", t.cfg.CustomFieldID, stray, t.cfg.Project)
}

func (t *Target) receipt(id int64) downstream.Receipt {
	s := strconv.FormatInt(id, 10)
	return downstream.Receipt{ExternalID: s, URL: t.api.Base + "/issues/" + s}
}

func (t *Target) call(req *http.Request, out any) error {
	req.Header.Set(APIKeyHeader, t.cfg.APIKey.Reveal())
	resp, err := t.api.Do(req)
	if err != nil {
		return err
	}
	if !resp.OK() {
		return t.api.Fail(resp, t.message(resp))
	}
	if out == nil {
		return nil // an update: 204 No Content
	}
	return resp.Result(out)
}

// message renders Redmine's {"errors": [...]} (422), or says what an
// answer without a body means: Redmine answers 401, 403 and 404 with none.
func (t *Target) message(r *rest.Response) string {
	var e struct {
		Errors []string `json:"errors"`
	}
	if json.Unmarshal(r.Body, &e) == nil && len(e.Errors) > 0 {
		return strings.Join(slices.Compact(e.Errors), "; ")
	}
	if len(strings.TrimSpace(string(r.Body))) > 0 && !strings.HasPrefix(r.Header.Get("Content-Type"), "text/html") {
		return rest.Message(r)
	}
	switch r.Status {
	case http.StatusUnauthorized:
		return "the API key was rejected (check the key, and that the REST API is enabled: Redmine ignores keys while it is off)"
	case http.StatusForbidden:
		return fmt.Sprintf("the API user may not do this in project %q (Redmine answers 403 without a reason)", t.cfg.Project)
	case http.StatusNotFound:
		return fmt.Sprintf("project %q not found (or not visible to the API user)", t.cfg.Project)
	}
	return http.StatusText(r.Status)
}
