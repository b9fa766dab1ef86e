package jira

// Fixed fields: what a team's project needs on every issue besides what
// ticketrelay fills (components, an assignee, custom fields such as
// customfield_10010), given once per target and sent with every create.

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"ticketrelay/delivery/downstream"
	"ticketrelay/ticket"
)

// Managed are the fields a create fills from the ticket: a fixed value
// for one of them is refused.
var Managed = []string{"project", "issuetype", "summary", "description", "labels"}

var (
	customField = regexp.MustCompile(`^customfield_[1-9][0-9]{0,9}$`)
	// systemFields are the system fields a fixed value may set.
	systemFields = []string{"components", "assignee", "reporter", "duedate", "environment", "fixVersions", "versions", "parent", "security", "priority"}
)

// ParseFields reads a target's fixed fields: a JSON object of Jira field
// ids to the values the create API takes for them, e.g.
// {"components":[{"name":"Backend"}],"customfield_10010":"ops"}. It refuses
// a field ticketrelay fills, a name that is neither a known system field
// nor customfield_N, and values of the wrong shape for components (a list
// of {"name"} or {"id"}) and assignee or reporter ({"accountId"}).
func ParseFields(s string) (map[string]json.RawMessage, error) {
	var m map[string]json.RawMessage
	d := json.NewDecoder(strings.NewReader(s))
	if err := d.Decode(&m); err != nil || d.More() {
		return nil, fmt.Errorf(`want a JSON object of field ids to values, e.g. {"components":[{"name":"Backend"}],"customfield_10010":"ops"}`)
	}
	for name, v := range m {
		switch {
		case slices.Contains(Managed, name):
			return nil, fmt.Errorf("field %q is filled from the ticket; it cannot be fixed", name)
		case !customField.MatchString(name) && !slices.Contains(systemFields, name):
			return nil, fmt.Errorf("field %q: want customfield_N or one of %s", name, strings.Join(systemFields, ", "))
		case string(v) == "null":
			return nil, fmt.Errorf("field %q: null sets nothing; leave the field out", name)
		}
		if err := checkShape(name, v); err != nil {
			return nil, fmt.Errorf("field %q: %w", name, err)
		}
	}
	return m, nil
}

// checkShape checks the values whose shape the create API fixes.
func checkShape(name string, v json.RawMessage) error {
	switch name {
	case "components", "fixVersions", "versions":
		var refs []struct {
			Name string `json:"name"`
			ID   string `json:"id"`
		}
		if json.Unmarshal(v, &refs) != nil || len(refs) == 0 || slices.ContainsFunc(refs, func(r struct {
			Name string `json:"name"`
			ID   string `json:"id"`
		}) bool {
			return r.Name == "" && r.ID == ""
		}) {
			return fmt.Errorf(`want a list of {"name": …} or {"id": …}`)
		}
	case "assignee", "reporter":
		var u struct {
			AccountID string `json:"accountId"`
		}
		if json.Unmarshal(v, &u) != nil || u.AccountID == "" {
			return fmt.Errorf(`want {"accountId": …}`)
		}
	}
	return nil
}

// TicketFields are the fields a create tool may set (decision 0185): the
// system fields by their short value (a project key, an issue type name,
// component and version names, an assignee's accountId, the parent's key,
// a due date), shaped here as the create API takes them, and custom
// fields, whose value is sent as given.
var TicketFields = downstream.Catalog{Kind: "jira",
	Named: map[string]string{
		"project": ticket.FieldString, "issuetype": ticket.FieldString, "parent": ticket.FieldString, "duedate": ticket.FieldString,
		"assignee": ticket.FieldString, "reporter": ticket.FieldString,
		"components": ticket.FieldArray, "fixVersions": ticket.FieldArray, "versions": ticket.FieldArray,
	},
	Patterns: []downstream.FieldPattern{{RE: customField, Spelling: "customfield_<N>", Type: ticket.FieldAny}},
}

// ticketFields shapes a ticket's field values (ticket.Request.TargetFields)
// as the create API takes them.
func ticketFields(fields map[string]json.RawMessage) map[string]any {
	out := map[string]any{}
	for name, v := range fields {
		s, _ := downstream.FieldString(fields, name)
		switch name {
		case "project", "parent":
			out[name] = map[string]string{"key": s}
		case "issuetype":
			out[name] = map[string]string{"name": s}
		case "assignee", "reporter":
			out[name] = map[string]string{"accountId": s}
		case "components", "fixVersions", "versions":
			refs := []map[string]string{}
			for _, n := range downstream.FieldStrings(fields, name) {
				refs = append(refs, map[string]string{"name": n})
			}
			out[name] = refs
		default: // duedate, customfield_N
			out[name] = v
		}
	}
	return out
}
