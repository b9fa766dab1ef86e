package config

import (
	"time"

	"ticketrelay/request"
)

// MaxGroupWindow bounds a target's group_window: a ticket that takes the
// repeats of its problem for longer than a year is one nobody reads.
const MaxGroupWindow = 366 * 24 * time.Hour

// validateGroupWindows checks each target's group_window.
func (f *File) validateGroupWindows(at spots, ps *problems) {
	for i, t := range f.Targets {
		if t.GroupWindow < 0 || t.GroupWindow > MaxGroupWindow || (t.GroupWindow > 0 && t.GroupWindow < time.Second) {
			ps.add(at.target(i).key("group_window"), "target %q: group_window %s: give a duration from 1s to %s (default %s)",
				t.Name, t.GroupWindow, MaxGroupWindow, request.DefaultGroupWindow)
		}
	}
}

// GroupWindows is each target's group_window, where one is set: how long
// a fingerprint's ticket takes the repeats of it (decision 0195).
func (f *File) GroupWindows() map[string]time.Duration {
	out := map[string]time.Duration{}
	for _, t := range f.Targets {
		if t.GroupWindow > 0 {
			out[t.Name] = t.GroupWindow
		}
	}
	return out
}
