package console

import (
	"fmt"
	"html/template"
	"strings"
	"time"
)

var funcs = template.FuncMap{
	// web reports whether u is a link a browser opens from the page: a
	// downstream's http(s) URL. Others (the local target's file:// URL)
	// are shown as text, which html/template would otherwise blank.
	"web": func(u string) bool { return strings.HasPrefix(u, "https://") || strings.HasPrefix(u, "http://") },
	// when is a moment in UTC, to the second.
	"when": func(t time.Time) string {
		if t.IsZero() {
			return "—"
		}
		return t.UTC().Format("2006-01-02 15:04:05Z")
	},
	"whenp": func(t *time.Time) string {
		if t == nil {
			return "—"
		}
		return t.UTC().Format("2006-01-02 15:04:05Z")
	},
	"dur": func(d time.Duration) string {
		switch {
		case d <= 0:
			return "0"
		case d < time.Millisecond:
			return d.Round(time.Microsecond).String()
		case d < time.Second:
			return d.Round(time.Millisecond).String()
		}
		return d.Round(time.Second).String()
	},
	"rate": func(r float64) string {
		if r < 0 {
			return "—"
		}
		return fmt.Sprintf("%.1f/s", r)
	},
	"httpStatus": func(n int) string {
		if n == 0 {
			return "—"
		}
		return fmt.Sprint(n)
	},
	"or": func(s, dflt string) string {
		if s == "" {
			return dflt
		}
		return s
	},
	// here: a list row held by host is this host's to act on ("" in a
	// host's own list).
	"here": func(host, self string) bool { return host == "" || host == self },
	"label": func(status string) string {
		if status == "" {
			return "all"
		}
		if status == "in_flight" {
			return "in flight"
		}
		return status
	},
}
