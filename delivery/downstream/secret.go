package downstream

import (
	"fmt"
	"log/slog"
)

// Redacted is what a Secret prints as, wherever it is printed.
const Redacted = "[REDACTED]"

// Secret holds a credential (API token, routing key, signing secret, hook
// URL). It never prints its value: %v, %+v, %#v, %s, slog and JSON all show
// Redacted, and a struct that holds a Secret shows only a pointer even when
// fmt walks its unexported fields. Reveal is the one way to read it.
type Secret struct {
	p *string // a pointer, so reflection-based printing shows an address
}

// NewSecret wraps s.
func NewSecret(s string) Secret { return Secret{p: &s} }

// Reveal returns the value, for the one place that sends it.
func (s Secret) Reveal() string {
	if s.p == nil {
		return ""
	}
	return *s.p
}

// IsZero reports whether the secret is empty.
func (s Secret) IsZero() bool { return s.Reveal() == "" }

func (s Secret) String() string {
	if s.IsZero() {
		return ""
	}
	return Redacted
}

// GoString implements fmt.GoStringer (%#v).
func (s Secret) GoString() string { return s.String() }

// Format implements fmt.Formatter, so every verb prints the redacted form.
func (s Secret) Format(f fmt.State, _ rune) { fmt.Fprint(f, s.String()) }

// LogValue implements slog.LogValuer.
func (s Secret) LogValue() slog.Value { return slog.StringValue(s.String()) }

// MarshalText implements encoding.TextMarshaler (JSON, YAML and slog's
// JSON handler use it): the value never leaves through an encoder.
func (s Secret) MarshalText() ([]byte, error) { return []byte(s.String()), nil }
