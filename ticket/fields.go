package ticket

// Fields a team's tickets need beyond ticketrelay's own (an issue type,
// components, an assignee, a custom field): declared per create tool in the
// configuration, each from an argument the agent gives or a fixed value
// (decision 0185). The values travel with the request to the adapter,
// which puts each where its API takes it.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Types an argument-mapped field may declare, as JSON Schema names them.
// FieldArray is an array of strings. FieldAny is no argument type: it is
// what a target's field takes when its API takes any JSON value there (a
// custom field), passed on as given.
const (
	FieldString  = "string"
	FieldInteger = "integer"
	FieldNumber  = "number"
	FieldBoolean = "boolean"
	FieldArray   = "array"
	FieldAny     = "any"
)

// FieldTypes are the types an argument may declare.
var FieldTypes = []string{FieldString, FieldInteger, FieldNumber, FieldBoolean, FieldArray}

// Limits on an argument-mapped field's value.
const (
	MaxFieldLen   = 1024 // characters of a string, or of one item of an array
	MaxFieldItems = 50
)

// FieldMap is one field of a create tool: the target's field it sets
// (Field, as the target's kind names it) and where its value comes from:
// Fixed, or the tool argument Argument.
type FieldMap struct {
	Field string
	// Fixed is the value (JSON) sent on every ticket of the tool; nil:
	// the value is Argument's.
	Fixed json.RawMessage
	// The argument: its name, JSON type (FieldTypes), allowed values (nil:
	// any), whether a call must give it, and what it means to the agent.
	Argument    string
	Type        string
	Enum        []json.RawMessage
	Required    bool
	Description string
	// Wrap, if set, sends the argument's value (each item's, for an array)
	// as the object {Wrap: value}: what a Jira select field takes
	// ({"value": "ops"}) or a reference by id ({"id": "10001"}).
	Wrap string
}

// Values reads the values of fields from the call's arguments (args:
// argument name → its JSON, as sent) into r: Fields gets those from
// arguments, Fixed the fixed ones. A value of the wrong type, outside the
// enum, or a required argument missing is an *InvalidError naming the
// argument. JSON null is a value left out.
func (r *Request) Values(fields []FieldMap, args map[string]json.RawMessage) error {
	r.Fields, r.Fixed = nil, nil
	for _, f := range fields {
		if f.Fixed != nil {
			if r.Fixed == nil {
				r.Fixed = map[string]json.RawMessage{}
			}
			r.Fixed[f.Field] = f.Fixed
			continue
		}
		raw, given := args[f.Argument]
		if !given || string(bytes.TrimSpace(raw)) == "null" {
			if f.Required {
				return invalid(f.Argument, "is required: %s", strings.TrimSuffix(f.Description, "."))
			}
			continue
		}
		v, err := f.value(raw)
		if err != nil {
			return err
		}
		if r.Fields == nil {
			r.Fields = map[string]json.RawMessage{}
		}
		r.Fields[f.Field] = v
	}
	return nil
}

// value checks one argument's JSON and returns it as sent on: canonical
// (so that two spellings of one value hash the same) and wrapped.
func (f FieldMap) value(raw json.RawMessage) (json.RawMessage, error) {
	if f.Type == FieldArray {
		var items []json.RawMessage
		if json.Unmarshal(raw, &items) != nil {
			return nil, invalid(f.Argument, "must be of type array, got %s", JSONType(raw))
		}
		if len(items) > MaxFieldItems {
			return nil, invalid(f.Argument, "has %d entries; at most %d are allowed", len(items), MaxFieldItems)
		}
		out := make([]json.RawMessage, len(items))
		for i, item := range items {
			one := f
			one.Type, one.Argument = FieldString, fmt.Sprintf("%s[%d]", f.Argument, i)
			v, err := one.value(item)
			if err != nil {
				return nil, err
			}
			out[i] = v
		}
		return json.Marshal(out)
	}
	v, err := CanonicalValue(f.Type, raw)
	if err != nil {
		return nil, invalid(f.Argument, "%v", err)
	}
	if f.Type == FieldString {
		var s string
		_ = json.Unmarshal(v, &s)
		if err := checkText(f.Argument, s, MaxFieldLen, false); err != nil {
			return nil, err
		}
		if strings.TrimSpace(s) == "" {
			return nil, invalid(f.Argument, "is empty; leave it out instead")
		}
		if (f.Field == "labels" || f.Field == "tags") && hasPrefixFold(s, ReservedLabelPrefix) {
			return nil, invalid(f.Argument, "%q starts with %q, which is reserved: ticketrelay marks its own tickets with such labels", s, ReservedLabelPrefix)
		}
	}
	if f.Enum != nil && !slices.ContainsFunc(f.Enum, func(e json.RawMessage) bool { return bytes.Equal(e, v) }) {
		return nil, invalid(f.Argument, "is %s; expected one of %s", v, joinJSON(f.Enum))
	}
	if f.Wrap != "" {
		return json.Marshal(map[string]json.RawMessage{f.Wrap: v})
	}
	return v, nil
}

// CanonicalValue checks that raw is a JSON value of type typ (FieldTypes
// but FieldArray, or FieldAny) and returns it in one spelling: strings as
// encoding/json writes them, integers without exponent or fraction, other
// numbers in their shortest form, objects with sorted keys.
func CanonicalValue(typ string, raw json.RawMessage) (json.RawMessage, error) {
	got := JSONType(raw)
	switch typ {
	case FieldString, FieldBoolean:
		if got != typ {
			return nil, fmt.Errorf("must be of type %s, got %s", typ, got)
		}
	case FieldInteger:
		n, err := strconv.ParseFloat(string(bytes.TrimSpace(raw)), 64)
		if got != FieldNumber && got != FieldInteger || err != nil || n != math.Trunc(n) || math.Abs(n) > 1<<53 {
			return nil, fmt.Errorf("must be of type integer, got %s", describe(raw))
		}
		return json.RawMessage(strconv.FormatInt(int64(n), 10)), nil
	case FieldNumber:
		n, err := strconv.ParseFloat(string(bytes.TrimSpace(raw)), 64)
		if got != FieldNumber && got != FieldInteger || err != nil {
			return nil, fmt.Errorf("must be of type number, got %s", got)
		}
		return json.RawMessage(strconv.FormatFloat(n, 'g', -1, 64)), nil
	}
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil, fmt.Errorf("is not valid JSON: %v", err)
	}
	return json.Marshal(v) // maps marshal with sorted keys
}

// JSONType names the JSON type of raw as JSON Schema does (an integer is
// "integer"), "null", or "invalid".
func JSONType(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || !json.Valid(raw) {
		return "invalid"
	}
	switch raw[0] {
	case '"':
		return FieldString
	case '{':
		return "object"
	case '[':
		return FieldArray
	case 't', 'f':
		return FieldBoolean
	case 'n':
		return "null"
	}
	if bytes.ContainsAny(raw, ".eE") {
		if n, err := strconv.ParseFloat(string(raw), 64); err == nil && n == math.Trunc(n) && math.Abs(n) <= 1<<53 {
			return FieldInteger // 1.0 is an integer to JSON Schema
		}
		return FieldNumber
	}
	return FieldInteger
}

// describe is a value as an error shows it: its type, and the value if a
// number (1.5 says more than "number").
func describe(raw json.RawMessage) string {
	if t := JSONType(raw); t != FieldNumber {
		return t
	}
	return "number " + string(bytes.TrimSpace(raw))
}

func joinJSON(vs []json.RawMessage) string {
	s := make([]string, len(vs))
	for i, v := range vs {
		s[i] = string(v)
	}
	return strings.Join(s, ", ")
}

// TargetFields are the values of r's fields, fixed and from arguments,
// as the adapter sends them (nil: none). A request read back from the
// ledger holds them all in Fields.
func (r *Request) TargetFields() map[string]json.RawMessage {
	if len(r.Fixed) == 0 {
		return r.Fields
	}
	out := maps.Clone(r.Fixed)
	maps.Copy(out, r.Fields)
	return out
}

// StoredFields is what the ledger's fields column holds for r: an
// update's Set, a create's TargetFields as a JSON object, or "".
func (r *Request) StoredFields() string {
	if r.Kind != KindCreate {
		return string(r.Set)
	}
	f := r.TargetFields()
	if len(f) == 0 {
		return ""
	}
	b, err := json.Marshal(f) // a map of valid JSON values: cannot fail
	if err != nil {
		panic(err)
	}
	return string(b)
}

// LoadFields sets what StoredFields gave from the stored text: Set for an
// update, Fields for a create (fixed values and arguments' together).
// Rows from before fields existed hold "".
func (r *Request) LoadFields(stored string) error {
	if stored == "" {
		return nil
	}
	if r.Kind != KindCreate {
		r.Set = json.RawMessage(stored)
		return nil
	}
	if err := json.Unmarshal([]byte(stored), &r.Fields); err != nil {
		return fmt.Errorf("fields %q: %w", stored, err)
	}
	return nil
}

// WithFields is t with its fields as a target that passes them on shows
// them: fixed values and arguments' together, in Fields.
func (t Ticket) WithFields() Ticket {
	t.Fields, t.Fixed = t.TargetFields(), nil
	return t
}
