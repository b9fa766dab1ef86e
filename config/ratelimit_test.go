package config_test

import (
	"strings"
	"testing"

	"ticketrelay/config"
	"ticketrelay/delivery/downstream"
)

const hookWithLimit = "targets:\n  - name: w\n    kind: webhook\n    endpoint: https://x.example/hook\n    rate_limit: %s\n"

func TestRateLimit(t *testing.T) {
	cases := []struct {
		yaml string
		want downstream.RateLimit
	}{
		{"{per_second: 10, burst: 5}", downstream.RateLimit{PerSecond: 10, Burst: 5}},
		{"{per_second: 0.5}", downstream.RateLimit{PerSecond: 0.5, Burst: 1}},
		{"{per_minute: 120, burst: 3}", downstream.RateLimit{PerSecond: 2, Burst: 3}},
		{"\n      per_minute: 30", downstream.RateLimit{PerSecond: 0.5, Burst: 1}},
	}
	for _, c := range cases {
		for _, lookup := range []func(string) (string, bool){env(), nil} { // the dispatcher's read, and mcp-front's
			f, err := config.Parse([]byte(strings.Replace(hookWithLimit, "%s", c.yaml, 1)), lookup)
			if err != nil {
				t.Fatalf("rate_limit %s: %v", c.yaml, err)
			}
			if got := f.Defs()[0].RateLimit; got != c.want {
				t.Errorf("rate_limit %s: %+v, want %+v", c.yaml, got, c.want)
			}
		}
	}
	f, err := config.Parse([]byte("targets:\n  - {name: w, kind: webhook, endpoint: 'https://x.example/hook'}\n"), env())
	if err != nil {
		t.Fatal(err)
	}
	if rl := f.Defs()[0].RateLimit; !rl.IsZero() {
		t.Errorf("a target without rate_limit has %+v", rl)
	}
}

// A rate limit that cannot be enforced stops either process with one line
// that names the line of the file and the target.
func TestRateLimitErrors(t *testing.T) {
	cases := []struct{ name, value, want string }{
		{"zero rate", "{per_second: 0}", `line 5: target "w" (webhook): rate_limit: per_second 0: want a positive number`},
		{"negative rate", "{per_minute: -60}", `line 5: target "w" (webhook): rate_limit: per_minute -60: want a positive number`},
		{"infinite rate", "{per_second: .inf}", `line 5: target "w" (webhook): rate_limit: per_second +Inf: want a positive number`},
		{"not a number", "{per_second: fast}", `line 5: target "w" (webhook): rate_limit.per_second: "fast" is not a number`},
		{"both rates", "{per_second: 1, per_minute: 60}", `line 5: target "w" (webhook): rate_limit: give per_second or per_minute, not both`},
		{"no rate", "{burst: 4}", `line 5: target "w" (webhook): rate_limit: give per_second or per_minute`},
		{"zero burst", "{per_second: 1, burst: 0}", `line 5: target "w" (webhook): rate_limit: burst 0: want at least 1 call`},
		{"fractional burst", "{per_second: 1, burst: 1.5}", `line 5: target "w" (webhook): rate_limit.burst: "1.5" is not a whole number`},
		{"unknown key", "{per_hour: 10}", `line 5: target "w" (webhook): unknown key "per_hour" in rate_limit`},
		{"repeated key", "{per_second: 1, per_second: 2}", `line 5: target "w" (webhook): rate_limit.per_second is given twice`},
		{"not a mapping", "10", `line 5: target "w" (webhook): rate_limit: want per_second or per_minute`},
		{"on its own lines", "\n      per_second: 1\n      burst: -2", `line 6: target "w" (webhook): rate_limit: burst -2`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for _, lookup := range []func(string) (string, bool){env(), nil} {
				_, err := config.Parse([]byte(strings.Replace(hookWithLimit, "%s", c.value, 1)), lookup)
				if err == nil {
					t.Fatalf("parsed without error; want %q", c.want)
				}
				if msg := err.Error(); !strings.Contains(msg, c.want) || strings.Contains(msg, "\n") {
					t.Fatalf("error %q: want one line containing %q", msg, c.want)
				}
			}
		})
	}
	_, err := config.Parse([]byte("targets:\n  - name: l\n    kind: local\n    rate_limit: {per_second: 1}\n"), nil)
	if err == nil || !strings.Contains(err.Error(), `line 4: target "l" (local): rate_limit does not apply to this kind`) {
		t.Fatalf("rate_limit on a local target: %v", err)
	}
}
