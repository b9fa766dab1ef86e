package mcptools

// A create tool's fields (decision 0185): the arguments its configuration
// maps to the target's fields join the tool's input schema, are taken out
// of a call's arguments before the tool's own are decoded, and are checked
// into the request (ticket.Request.Values).

import (
	"encoding/json"
	"maps"
	"slices"
	"unicode/utf8"

	"ticketrelay/ticket"
)

// inputSchema is b's create tool's input schema: createInputSchema with
// the arguments of b's fields.
func inputSchema(b Binding) map[string]any {
	var args []ticket.FieldMap
	for _, f := range b.Fields {
		if f.Argument != "" {
			args = append(args, f)
		}
	}
	if len(args) == 0 {
		return createInputSchema
	}
	s := maps.Clone(createInputSchema)
	props := maps.Clone(createInputSchema["properties"].(map[string]any))
	required := slices.Clone(createInputSchema["required"].([]string))
	for _, f := range args {
		props[f.Argument] = argumentSchema(f)
		if f.Required {
			required = append(required, f.Argument)
		}
	}
	s["properties"], s["required"] = props, required
	return s
}

// argumentSchema is the JSON Schema of one field's argument.
func argumentSchema(f ticket.FieldMap) map[string]any {
	one := map[string]any{"type": f.Type, "description": f.Description}
	item := one
	switch f.Type {
	case ticket.FieldString:
		one["minLength"], one["maxLength"] = 1, ticket.MaxFieldLen
	case ticket.FieldArray:
		item = map[string]any{"type": ticket.FieldString, "minLength": 1, "maxLength": ticket.MaxFieldLen}
		one["items"], one["maxItems"] = item, ticket.MaxFieldItems
	}
	if f.Enum != nil {
		item["enum"] = f.Enum
	}
	return one
}

// splitFields takes the arguments of b's fields out of raw, a call's
// arguments: what is left (own) is the tool's own, for decodeArgs. raw
// that is no JSON object, or not UTF-8, is left whole to decodeArgs,
// which says what is wrong with it; a name given twice, or unknown, is
// refused here as decodeArgs refuses it among the tool's own.
func splitFields(b Binding, raw json.RawMessage) (own json.RawMessage, given map[string]json.RawMessage, err error) {
	var all map[string]json.RawMessage
	if len(b.Fields) == 0 || !utf8.Valid(raw) || json.Unmarshal(raw, &all) != nil || all == nil {
		return raw, nil, nil
	}
	if err := checkNames(raw, append(argNames(&createArgs{}), fieldArguments(b)...)); err != nil {
		return raw, nil, err
	}
	given = map[string]json.RawMessage{}
	for _, name := range fieldArguments(b) {
		if v, ok := all[name]; ok {
			given[name] = v
			delete(all, name)
		}
	}
	own, err = json.Marshal(all)
	return own, given, err
}

func fieldArguments(b Binding) []string {
	var out []string
	for _, f := range b.Fields {
		if f.Argument != "" {
			out = append(out, f.Argument)
		}
	}
	return out
}
