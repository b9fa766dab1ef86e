package archetype_test

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	"ticketrelay/internal/archetype"
)

func TestZeroArchetypeHasDefaults(t *testing.T) {
	a := archetype.Archetype{}.WithDefaults()
	if a.Logger == nil || a.Now == nil {
		t.Fatalf("WithDefaults left %+v", a)
	}
	a.Logger.Info("discarded") // must not panic
	if d := time.Since(a.Now()); d < 0 || d > time.Minute {
		t.Errorf("the default clock is %s off", d)
	}
}

func TestComponentNamesItsLines(t *testing.T) {
	var buf bytes.Buffer
	fixed := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	base := archetype.Archetype{Logger: slog.New(slog.NewTextHandler(&buf, nil)), Now: func() time.Time { return fixed }}
	relay := base.Component("relay")
	relay.Logger.Info("hello")
	if !strings.Contains(buf.String(), "component=relay") {
		t.Errorf("a component's line does not name it: %q", buf.String())
	}
	if !relay.Now().Equal(fixed) {
		t.Errorf("Component changed the clock")
	}
	buf.Reset()
	base.Logger.Info("plain")
	if strings.Contains(buf.String(), "component=") {
		t.Errorf("Component changed the archetype it came from: %q", buf.String())
	}
}
