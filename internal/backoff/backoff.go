// Package backoff computes capped exponential delays with "equal jitter"
// (AWS Architecture Blog, "Exponential Backoff and Jitter").
package backoff

import (
	"math/rand/v2"
	"time"
)

// Policy is a capped exponential backoff.
type Policy struct {
	Base time.Duration // delay scale of the first retry
	Max  time.Duration // cap on any delay
}

// Ceiling is the upper bound of the delay before retry number attempt
// (1-based): Base·2^(attempt-1), capped at Max.
func (p Policy) Ceiling(attempt int) time.Duration {
	d := p.Base
	for i := 1; i < attempt && d < p.Max; i++ {
		d *= 2
	}
	return min(d, p.Max)
}

// Delay is a uniformly random delay in [Ceiling/2, Ceiling]: jittered so that
// retries from many callers spread out, but never so short that a retry
// storm hits a struggling downstream at once.
func (p Policy) Delay(attempt int) time.Duration {
	c := p.Ceiling(attempt)
	if c <= 1 {
		return c
	}
	return c/2 + rand.N(c/2+1)
}
