package mcptools

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"sync"
	"unicode/utf8"

	"ticketrelay/internal/jsonscan"
	"ticketrelay/ticket"
)

// decodeArgs decodes a tool's JSON arguments strictly into the struct v
// points to: invalid UTF-8, unknown arguments (names match exactly), an
// argument given twice, wrong types and trailing data are errors that name
// the argument.
func decodeArgs(raw json.RawMessage, v any) error {
	if len(bytes.TrimSpace(raw)) == 0 || bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		raw = json.RawMessage("{}")
	}
	if !utf8.Valid(raw) {
		return invalidUTF8(raw)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return translateDecodeError(err, raw, v)
	}
	if dec.More() {
		return &ticket.InvalidError{Argument: "arguments", Reason: "have trailing data after the JSON object"}
	}
	return checkNames(raw, argNames(v))
}

// checkNames catches what encoding/json lets through: it matches names
// regardless of case ("Title" sets title) and keeps the last of two equal
// names, so a call could mean something other than what a reader of it sees.
func checkNames(raw json.RawMessage, names []string) error {
	var unknown error // the first name not declared, if it comes before a repeated one
	dup := jsonscan.Duplicate(raw, func(name string, _ []byte) {
		if unknown != nil || slices.Contains(names, name) {
			return
		}
		reason := fmt.Sprintf("unknown argument %q", name)
		if i := slices.IndexFunc(names, func(n string) bool { return strings.EqualFold(n, name) }); i >= 0 {
			reason += fmt.Sprintf(" (names are case-sensitive: %q)", names[i])
		}
		unknown = &ticket.InvalidError{Argument: "arguments", Reason: reason}
	})
	switch {
	case unknown != nil:
		return unknown
	case dup != "":
		return &ticket.InvalidError{Argument: dup, Reason: "is given more than once"}
	}
	return nil
}

var argNamesOf sync.Map // reflect.Type → []string

// argNames lists the JSON names of the fields of the struct v points to.
func argNames(v any) []string {
	t := reflect.TypeOf(v).Elem()
	if names, ok := argNamesOf.Load(t); ok {
		return names.([]string)
	}
	names := make([]string, t.NumField())
	for i := range names {
		names[i], _, _ = strings.Cut(t.Field(i).Tag.Get("json"), ",")
	}
	argNamesOf.Store(t, names)
	return names
}

// invalidUTF8 names the argument whose value holds the bytes that are not
// UTF-8 (the first in name order), or the arguments as a whole when the bytes
// sit in a name or outside any value.
func invalidUTF8(raw json.RawMessage) error {
	var args map[string]json.RawMessage // values keep their bytes as sent
	if json.Unmarshal(raw, &args) == nil {
		for _, name := range slices.Sorted(maps.Keys(args)) {
			if !utf8.Valid(args[name]) && !strings.ContainsRune(name, utf8.RuneError) {
				return &ticket.InvalidError{Argument: name, Reason: "is not valid UTF-8"}
			}
		}
	}
	return &ticket.InvalidError{Argument: "arguments", Reason: "are not valid UTF-8"}
}

func translateDecodeError(err error, raw json.RawMessage, v any) error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		if te.Field == "" {
			return &ticket.InvalidError{Argument: "arguments", Reason: "must be a JSON object, got " + te.Value}
		}
		field, _, _ := strings.Cut(te.Field, ".")
		got := te.Value // "number 1.5", "string", "array", …
		if got == "bool" {
			got = "boolean" // as JSON Schema names it
		}
		return &ticket.InvalidError{Argument: itemName(raw, v, field, te),
			Reason: fmt.Sprintf("must be of type %s, got %s", jsonType(te.Type.Kind()), got)}
	}
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		return &ticket.InvalidError{Argument: "arguments", Reason: "unknown argument " + name}
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return &ticket.InvalidError{Argument: "arguments", Reason: "are not valid JSON: " + se.Error()}
	}
	return &ticket.InvalidError{Argument: "arguments", Reason: err.Error()}
}

// itemName names the argument of a type error: field itself, or, when an
// item of an array argument (a slice field of the struct v points to) has
// the wrong type, that item (labels[1]).
func itemName(raw json.RawMessage, v any, field string, te *json.UnmarshalTypeError) string {
	i := slices.Index(argNames(v), field)
	if i < 0 || reflect.TypeOf(v).Elem().Field(i).Type.Kind() != reflect.Slice || te.Type.Kind() == reflect.Slice {
		return field // not an array argument, or not an array at all
	}
	var args map[string]json.RawMessage
	var items []json.RawMessage
	if json.Unmarshal(raw, &args) != nil || json.Unmarshal(args[field], &items) != nil {
		return field
	}
	want := te.Type.Kind() == reflect.String
	for i, item := range items {
		if string(item) == "null" {
			continue // decodes as the zero value, without error
		}
		if isString := len(item) > 0 && item[0] == '"'; isString != want {
			return fmt.Sprintf("%s[%d]", field, i)
		}
	}
	return field
}

// jsonType names a Go kind as JSON Schema names the type.
func jsonType(kind reflect.Kind) string {
	switch kind {
	case reflect.Slice, reflect.Array:
		return "array"
	case reflect.Struct, reflect.Map:
		return "object"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "integer"
	case reflect.Float32, reflect.Float64:
		return "number"
	case reflect.Bool:
		return "boolean"
	}
	return kind.String() // string
}
