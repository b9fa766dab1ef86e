package downstream

// The fields a kind's tickets take beyond ticketrelay's own (decision
// 0185): each adapter declares its Catalog, which the configuration is
// checked against when it loads, and reads the values a create tool's
// fields gave (ticket.Request.TargetFields) into its API's request body.

import (
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"ticketrelay/ticket"
)

// Catalog is the fields one kind's tickets take: by name, the JSON type of
// a value (ticket.FieldString, …; ticket.FieldAny: any JSON value, sent as
// given), and patterns for families of fields (Jira's customfield_N).
type Catalog struct {
	Kind     string
	Named    map[string]string
	Patterns []FieldPattern
	// Reserved are names a pattern matches that ticketrelay fills itself.
	Reserved []string
}

// FieldPattern is a family of fields: names matching RE, spelled as
// Spelling in errors, whose values have type Type.
type FieldPattern struct {
	RE       *regexp.Regexp
	Spelling string
	Type     string
}

// Type is the type of field name's values, or an error naming the fields
// the kind takes.
func (c Catalog) Type(name string) (string, error) {
	if slices.Contains(c.Reserved, name) {
		return "", fmt.Errorf("%s: field %q is filled by ticketrelay", c.Kind, name)
	}
	if t, ok := c.Named[name]; ok {
		return t, nil
	}
	for _, p := range c.Patterns {
		if p.RE.MatchString(name) {
			return p.Type, nil
		}
	}
	known := slices.Sorted(maps.Keys(c.Named))
	for _, p := range c.Patterns {
		known = append(known, p.Spelling)
	}
	if len(known) == 0 {
		return "", fmt.Errorf("a %s target takes no fields", c.Kind)
	}
	return "", fmt.Errorf("%s has no field %q (known: %s)", c.Kind, name, strings.Join(known, ", "))
}

// CustomFieldsPrefix names a custom field by its numeric id where an API
// takes custom fields as a list of {"id", "value"} (Zendesk, Redmine):
// custom_fields.360001234.
const CustomFieldsPrefix = "custom_fields."

// CustomFieldPattern is the catalog pattern of CustomFieldsPrefix fields.
var CustomFieldPattern = FieldPattern{RE: regexp.MustCompile(`^custom_fields\.[1-9][0-9]{0,18}$`),
	Spelling: CustomFieldsPrefix + "<id>", Type: ticket.FieldAny}

// CustomFields turns the CustomFieldsPrefix fields of fields into the
// list the API takes, by id in ascending order, after those of first.
func CustomFields(fields map[string]json.RawMessage, first ...map[string]any) []map[string]any {
	out := first
	ids := []int64{}
	values := map[int64]json.RawMessage{}
	for name, v := range fields {
		if s, ok := strings.CutPrefix(name, CustomFieldsPrefix); ok {
			if id, err := strconv.ParseInt(s, 10, 64); err == nil {
				ids = append(ids, id)
				values[id] = v
			}
		}
	}
	slices.Sort(ids)
	for _, id := range ids {
		out = append(out, map[string]any{"id": id, "value": values[id]})
	}
	return out
}

// FieldStrings reads a field of type ticket.FieldArray; nil if unset.
func FieldStrings(fields map[string]json.RawMessage, name string) []string {
	var out []string
	if v, ok := fields[name]; ok {
		_ = json.Unmarshal(v, &out) // checked when the request was accepted
	}
	return out
}

// FieldString reads a field of type ticket.FieldString.
func FieldString(fields map[string]json.RawMessage, name string) (string, bool) {
	var s string
	v, ok := fields[name]
	return s, ok && json.Unmarshal(v, &s) == nil
}
