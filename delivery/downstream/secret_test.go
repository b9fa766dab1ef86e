package downstream_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"ticketrelay/delivery/downstream"
)

func TestSecretNeverPrints(t *testing.T) {
	const value = "hunter2-very-secret"
	s := downstream.NewSecret(value)
	type holder struct {
		Exported   downstream.Secret
		unexported downstream.Secret
	}
	h := holder{Exported: s, unexported: s}
	var out []string
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x"} {
		out = append(out, fmt.Sprintf(verb, s), fmt.Sprintf(verb, h), fmt.Sprintf(verb, &h))
	}
	j, _ := json.Marshal(h)
	out = append(out, string(j))
	var buf bytes.Buffer
	for _, hd := range []slog.Handler{slog.NewTextHandler(&buf, nil), slog.NewJSONHandler(&buf, nil)} {
		slog.New(hd).Info("x", "secret", s, "holder", h)
	}
	out = append(out, buf.String())
	for _, o := range out {
		if strings.Contains(o, value) || strings.Contains(o, fmt.Sprintf("%x", value)) {
			t.Fatalf("a secret leaked: %s", o)
		}
	}
	if !strings.Contains(fmt.Sprint(s), downstream.Redacted) || s.Reveal() != value {
		t.Fatalf("Secret prints %q, reveals %q", fmt.Sprint(s), s.Reveal())
	}
	if z := (downstream.Secret{}); !z.IsZero() || z.Reveal() != "" || fmt.Sprint(z) != "" {
		t.Fatal("the zero Secret is not empty")
	}
}
