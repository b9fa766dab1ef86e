package config

// A create tool's fields (decision 0185): the target's fields it sets on
// every ticket, each from an argument the agent gives or a fixed value.
//
//	tools:
//	  - name: report_bug
//	    target: jira
//	    fields:
//	      - {field: issuetype, value: Bug}
//	      - field: customfield_10010
//	        argument: team
//	        enum: [ops, web]
//	        required: true
//	        wrap: value
//	        description: The team that owns the bug.

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"ticketrelay/delivery/downstream"
	"ticketrelay/delivery/targets"
	"ticketrelay/ticket"
)

// ReservedArguments are the create tools' own arguments: a field's
// argument may not take one of their names.
var ReservedArguments = []string{"request_id", "title", "body", "priority", "labels", "wait_for_delivery_seconds", "fingerprint"}

// ToolField is one item of a tool's fields, as written.
type ToolField struct {
	Field       string
	Value       *yaml.Node // nil: from Argument
	Argument    string
	Type        string
	Enum        []*yaml.Node
	Required    bool
	Description string
	Wrap        string

	line int
	keys map[string]int // key → its line
	bad  bool           // UnmarshalYAML reported it
}

var toolFieldKeys = []string{"field", "value", "argument", "type", "enum", "required", "description", "wrap"}

// UnmarshalYAML reads one field strictly: unknown or repeated keys and
// values of the wrong YAML kind are errors naming their line; what needs
// the target is checked by check.
func (f *ToolField) UnmarshalYAML(n *yaml.Node) error {
	*f = ToolField{line: n.Line, keys: map[string]int{}}
	var errs []string
	fail := func(line int, format string, args ...any) {
		errs = append(errs, fmt.Sprintf("line %d: ", line)+fmt.Sprintf(format, args...))
	}
	if n.Kind != yaml.MappingNode {
		fail(n.Line, "a tool's field: want a mapping with field and either value or argument (e.g. {field: issuetype, value: Bug})")
	}
	for i := 0; n.Kind == yaml.MappingNode && i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		switch {
		case !slices.Contains(toolFieldKeys, k.Value):
			fail(k.Line, "unknown key %q in a tool's field (known: %s)", k.Value, strings.Join(toolFieldKeys, ", "))
			continue
		case f.keys[k.Value] > 0:
			fail(k.Line, "fields: %s is given twice", k.Value)
			continue
		}
		f.keys[k.Value] = k.Line
		scalar := func(dst *string) {
			if v.Kind != yaml.ScalarNode || v.Tag == "!!null" {
				fail(v.Line, "fields: %s: want a single value", k.Value)
			}
			*dst = strings.TrimSpace(v.Value)
		}
		switch k.Value {
		case "field":
			scalar(&f.Field)
		case "value":
			f.Value = v
		case "argument":
			scalar(&f.Argument)
		case "type":
			scalar(&f.Type)
		case "description":
			scalar(&f.Description)
		case "wrap":
			scalar(&f.Wrap)
		case "required":
			if v.Decode(&f.Required) != nil || v.Kind != yaml.ScalarNode {
				fail(v.Line, "fields: required: %q is not true or false", v.Value)
			}
		case "enum":
			if v.Kind != yaml.SequenceNode || len(v.Content) == 0 {
				fail(v.Line, "fields: enum: want a list of the values allowed")
			}
			f.Enum = v.Content
		}
	}
	if len(errs) > 0 {
		f.bad = true
		return &yaml.TypeError{Errors: errs}
	}
	return nil
}

var (
	argumentRE = regexp.MustCompile(`^[a-z][a-z0-9_]{0,63}$`)
	wrapRE     = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_]{0,31}$`)
)

// checkFields checks t's fields against the target d it is bound to,
// adding every problem to ps, and keeps what the tool serves (FieldMaps).
func (t *Tool) checkFields(d targets.Def, ps *problems) {
	t.maps = nil
	cat := targets.FieldCatalog(d.Kind)
	where := fmt.Sprintf("tool %q: fields", t.Name)
	fields, args := map[string]bool{}, map[string]bool{}
	for _, f := range t.Fields {
		if f.bad {
			continue // reported where it was read
		}
		at := func(key string) int {
			if l := f.keys[key]; l > 0 {
				return l
			}
			return f.line
		}
		if f.Field == "" {
			ps.add(f.line, "%s: an item without field (the %s field it sets)", where, d.Kind)
			continue
		}
		catType, err := cat.Type(f.Field)
		if err != nil {
			ps.add(at("field"), "%s: %v", where, err)
			continue
		}
		where := fmt.Sprintf("%s: %s", where, f.Field)
		switch {
		case fields[f.Field]:
			ps.add(at("field"), "%s is set twice", where)
			continue
		case d.Kind == "jira" && d.Fields[f.Field] != nil:
			ps.add(at("field"), "%s is also fixed by target %q (options.fields); set it in one place", where, d.Name)
			continue
		case d.Kind == "redmine" && d.CustomFieldID != 0 && f.Field == downstream.CustomFieldsPrefix+strconv.Itoa(d.CustomFieldID):
			ps.add(at("field"), "%s holds the dedupe key of target %q (options.custom_field_id)", where, d.Name)
			continue
		}
		fields[f.Field] = true
		m, ok := f.fieldMap(catType, where, at, ps)
		if !ok {
			continue
		}
		if m.Argument != "" {
			if args[m.Argument] {
				ps.add(at("argument"), "%s: argument %q is used by another field of the tool", where, m.Argument)
				continue
			}
			args[m.Argument] = true
		}
		t.maps = append(t.maps, m)
	}
}

// fieldMap checks one field whose target field takes values of type
// catType and returns what the tool serves of it.
func (f ToolField) fieldMap(catType, where string, at func(string) int, ps *problems) (ticket.FieldMap, bool) {
	m := ticket.FieldMap{Field: f.Field, Argument: f.Argument, Required: f.Required, Description: f.Description, Wrap: f.Wrap}
	if (f.Value == nil) == (f.Argument == "") {
		ps.add(f.line, "%s: give either value (fixed) or argument (the agent's), not both or neither", where)
		return m, false
	}
	if f.Value != nil {
		for _, k := range []string{"type", "enum", "required", "description", "wrap"} {
			if f.keys[k] > 0 {
				ps.add(at(k), "%s: %s applies to an argument, not to a fixed value", where, k)
				return m, false
			}
		}
		v, err := fixedValue(f.Value, catType)
		if err != nil {
			ps.add(at("value"), "%s: value %v", where, err)
			return m, false
		}
		m.Fixed = v
		return m, true
	}
	switch {
	case !argumentRE.MatchString(f.Argument):
		ps.add(at("argument"), "%s: argument %q: use 1-64 lower-case letters, digits and _, starting with a letter", where, f.Argument)
		return m, false
	case slices.Contains(ReservedArguments, f.Argument):
		ps.add(at("argument"), "%s: argument %q is one of the tool's own (%s); choose another name", where, f.Argument, strings.Join(ReservedArguments, ", "))
		return m, false
	}
	m.Type = f.Type
	if m.Type == "" {
		m.Type = catType
		if catType == ticket.FieldAny {
			m.Type = ticket.FieldString
		}
	}
	switch {
	case !slices.Contains(ticket.FieldTypes, m.Type):
		ps.add(at("type"), "%s: type %q: want one of %s", where, m.Type, strings.Join(ticket.FieldTypes, ", "))
		return m, false
	case catType != ticket.FieldAny && m.Type != catType:
		ps.add(at("type"), "%s: type %q: the field takes %s", where, m.Type, article(catType))
		return m, false
	case f.Wrap != "" && catType != ticket.FieldAny:
		ps.add(at("wrap"), "%s: wrap applies to a field that takes any value (a custom field); this one takes %s", where, article(catType))
		return m, false
	case f.Wrap != "" && !wrapRE.MatchString(f.Wrap):
		ps.add(at("wrap"), "%s: wrap %q: want a JSON key such as value, id or name", where, f.Wrap)
		return m, false
	case f.Type == ticket.FieldBoolean && f.Enum != nil:
		ps.add(at("enum"), "%s: enum does not apply to a boolean", where)
		return m, false
	}
	if m.Description == "" {
		m.Description = "Sets " + f.Field + "."
	}
	itemType := m.Type
	if itemType == ticket.FieldArray {
		itemType = ticket.FieldString // an enum lists the items allowed
	}
	for _, e := range f.Enum {
		v, err := fixedValue(e, itemType)
		if err != nil {
			ps.add(e.Line, "%s: enum: %v", where, err)
			return m, false
		}
		if slices.ContainsFunc(m.Enum, func(o json.RawMessage) bool { return string(o) == string(v) }) {
			ps.add(e.Line, "%s: enum lists %s twice", where, v)
			return m, false
		}
		m.Enum = append(m.Enum, v)
	}
	return m, true
}

// fixedValue is the JSON of a value written in the file, checked against
// the type typ of the field (or of an enum's items).
func fixedValue(n *yaml.Node, typ string) (json.RawMessage, error) {
	var v any
	if err := n.Decode(&v); err != nil || v == nil {
		return nil, fmt.Errorf("%q: want a value (null sets nothing; leave the field out)", n.Value)
	}
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("%q: %v", n.Value, err)
	}
	if typ == ticket.FieldArray {
		var items []string
		if json.Unmarshal(raw, &items) != nil || len(items) == 0 {
			return nil, fmt.Errorf("%s: want a list of strings", raw)
		}
		return raw, nil
	}
	out, err := ticket.CanonicalValue(typ, raw)
	if err != nil {
		return nil, fmt.Errorf("%s: %v", raw, err)
	}
	return out, nil
}

func article(typ string) string {
	if typ == ticket.FieldInteger || typ == ticket.FieldArray {
		return "an " + typ
	}
	return "a " + typ
}

// FieldMaps are the tool's fields as its calls apply them (checked when
// the file was parsed).
func (t Tool) FieldMaps() []ticket.FieldMap { return t.maps }
