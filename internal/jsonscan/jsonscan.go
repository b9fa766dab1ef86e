// Package jsonscan reads the members of a raw JSON object as they were
// sent: in order, names exactly as spelled, repeats included.
//
// It exists because encoding/json takes the last of two equal names and
// matches names without regard to case, while go-sdk's decoder matches
// them exactly: the JSON-RPC guard and the tools' argument decoder must see
// names as they were sent.
package jsonscan

import (
	"encoding/json"
	"slices"
)

// Members calls fn with each member of the JSON object b, in order: its
// name, decoded, and its value's raw bytes. b must be valid JSON; if it is
// not an object, fn is never called. It stops when fn returns false.
func Members(b []byte, fn func(name string, value []byte) bool) {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return
	}
	i++
	for {
		i = skipSpace(b, i)
		if i < len(b) && b[i] == ',' {
			i = skipSpace(b, i+1)
		}
		if i >= len(b) || b[i] != '"' {
			return // '}' or the end
		}
		end := skipValue(b, i)
		name := DecodeString(b[i:end])
		i = skipSpace(b, end)
		i = skipSpace(b, i+1) // the ':'
		end = skipValue(b, i)
		if !fn(name, b[i:end]) {
			return
		}
		i = end
	}
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipValue returns the index just past the JSON value that starts at b[i].
func skipValue(b []byte, i int) int {
	if i >= len(b) {
		return i
	}
	switch b[i] {
	case '"':
		for j := i + 1; j < len(b); j++ {
			switch b[j] {
			case '\\':
				j++
			case '"':
				return j + 1
			}
		}
		return len(b)
	case '{', '[':
		depth, inString := 0, false
		for j := i; j < len(b); j++ {
			c := b[j]
			switch {
			case inString && c == '\\':
				j++
			case inString:
				inString = c != '"'
			case c == '"':
				inString = true
			case c == '{' || c == '[':
				depth++
			case c == '}' || c == ']':
				if depth--; depth == 0 {
					return j + 1
				}
			}
		}
		return len(b)
	}
	j := i
	for j < len(b) && b[j] != ',' && b[j] != '}' && b[j] != ']' && b[j] != ' ' && b[j] != '\t' && b[j] != '\n' && b[j] != '\r' {
		j++
	}
	return j
}

// DecodeString decodes a raw JSON string; escapes are rare in names, so only
// they pay for a decoder.
func DecodeString(raw []byte) string {
	if len(raw) < 2 || raw[0] != '"' {
		return ""
	}
	inner := raw[1 : len(raw)-1]
	for _, c := range inner {
		if c == '\\' {
			var s string
			json.Unmarshal(raw, &s) // valid JSON: cannot fail
			return s
		}
	}
	return string(inner)
}

// Duplicate returns the first name the JSON object b holds twice, or "";
// each member before it is handed to fn, if fn is not nil.
func Duplicate(b []byte, fn func(name string, value []byte)) (dup string) {
	seen := make([]string, 0, 8)
	Members(b, func(name string, v []byte) bool {
		if slices.Contains(seen, name) {
			dup = name
			return false
		}
		seen = append(seen, name)
		if fn != nil {
			fn(name, v)
		}
		return true
	})
	return dup
}
