package config

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"

	"go.yaml.in/yaml/v3"

	"ticketrelay/delivery/downstream"
)

// RateLimit is a target's rate_limit: the pace its API allows, as
// per_second or per_minute (one of the two), and burst, the most calls
// sent at once (default 1: evenly spaced). The dispatcher never calls the
// target faster; a 429 and its Retry-After are still honoured on top.
type RateLimit struct {
	PerSecond *float64 `yaml:"per_second,omitempty"`
	PerMinute *float64 `yaml:"per_minute,omitempty"`
	Burst     *int     `yaml:"burst,omitempty"`
	// Line is where rate_limit is written, for errors.
	Line int `yaml:"-"`

	bad bool // UnmarshalYAML reported it: limit is not asked again
}

var rateLimitKeys = []string{"per_second", "per_minute", "burst"}

// UnmarshalYAML reads the mapping strictly (unknown or repeated keys,
// values that are not numbers are errors naming their line); the values
// are checked by limit, where the target is known. Its errors are a
// *yaml.TypeError, which the decoder collects and goes on: the rest of the
// file is still checked.
func (r *RateLimit) UnmarshalYAML(n *yaml.Node) error {
	*r = RateLimit{Line: n.Line}
	var errs []string
	fail := func(line int, format string, args ...any) {
		errs = append(errs, fmt.Sprintf("line %d: ", line)+fmt.Sprintf(format, args...))
	}
	if n.Kind != yaml.MappingNode {
		fail(n.Line, "rate_limit: want per_second or per_minute, and optionally burst (e.g. {per_second: 10, burst: 5})")
	}
	var seen []string
	for i := 0; n.Kind == yaml.MappingNode && i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if !slices.Contains(rateLimitKeys, k.Value) {
			fail(k.Line, "unknown key %q in rate_limit (known: per_second, per_minute, burst)", k.Value)
			continue
		}
		if slices.Contains(seen, k.Value) {
			fail(k.Line, "rate_limit.%s is given twice", k.Value)
			continue
		}
		seen = append(seen, k.Value)
		var err error
		switch k.Value {
		case "burst":
			// Not Decode: it reads 1.5 as 1.
			var b int
			b, err = strconv.Atoi(v.Value)
			r.Burst = &b
		case "per_second":
			r.PerSecond = new(float64)
			err = v.Decode(r.PerSecond)
		case "per_minute":
			r.PerMinute = new(float64)
			err = v.Decode(r.PerMinute)
		}
		if err != nil || v.Kind != yaml.ScalarNode {
			what := "a number"
			if k.Value == "burst" {
				what = "a whole number"
			}
			fail(v.Line, "rate_limit.%s: %q is not %s", k.Value, v.Value, what)
		}
	}
	if len(errs) > 0 {
		r.bad = true
		return &yaml.TypeError{Errors: errs}
	}
	return nil
}

// limit is the rate limit r describes.
func (r *RateLimit) limit() (downstream.RateLimit, error) {
	var l downstream.RateLimit
	switch {
	case r.PerSecond != nil && r.PerMinute != nil:
		return l, errors.New("give per_second or per_minute, not both")
	case r.PerSecond != nil:
		l.PerSecond = *r.PerSecond
		if err := positiveRate("per_second", *r.PerSecond); err != nil {
			return l, err
		}
	case r.PerMinute != nil:
		if err := positiveRate("per_minute", *r.PerMinute); err != nil {
			return l, err
		}
		l.PerSecond = *r.PerMinute / 60
	default:
		return l, errors.New("give per_second or per_minute (calls the API allows)")
	}
	l.Burst = 1
	if r.Burst != nil {
		if *r.Burst < 1 {
			return l, fmt.Errorf("burst %d: want at least 1 call", *r.Burst)
		}
		l.Burst = *r.Burst
	}
	return l, l.Validate()
}

func positiveRate(key string, v float64) error {
	if !(v > 0) || math.IsInf(v, 0) {
		return fmt.Errorf("%s %v: want a positive number of calls (to stop calling a target, remove it)", key, v)
	}
	return nil
}
