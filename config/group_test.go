package config_test

import (
	"strings"
	"testing"
	"time"

	"ticketrelay/config"
)

// group_window is read per target, and a window out of range is refused
// at its line when the file loads.
func TestGroupWindow(t *testing.T) {
	f, err := config.Parse([]byte(`
targets:
  - {name: a, kind: local, group_window: 2h}
  - {name: b, kind: local}
tools:
  - {name: x, target: a}
  - {name: y, target: b}
`), env())
	if err != nil {
		t.Fatal(err)
	}
	if w := f.GroupWindows(); len(w) != 1 || w["a"] != 2*time.Hour {
		t.Fatalf("GroupWindows = %v; want a: 2h only", w)
	}
	for _, bad := range []string{"-1h", "500ms", "9000h"} {
		_, err := config.Parse([]byte(`
targets:
  - name: a
    kind: local
    group_window: `+bad+`
tools:
  - {name: x, target: a}
`), env())
		if err == nil || !strings.Contains(err.Error(), "line 5") || !strings.Contains(err.Error(), "group_window") {
			t.Errorf("group_window %s: %v; want refused at line 5", bad, err)
		}
	}
}
