package bench

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"time"
)

// percentile returns the nearest-rank p-th percentile (0 < p ≤ 100) of
// sorted, or 0 if it is empty.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(float64(len(sorted))*p/100+0.999999999) - 1
	return sorted[min(max(rank, 0), len(sorted)-1)]
}

func sortDurations(d []time.Duration) []time.Duration {
	slices.SortFunc(d, func(a, b time.Duration) int { return cmp.Compare(a, b) })
	return d
}

// ms formats d in milliseconds with a precision that suits its size.
func ms(d time.Duration) string {
	f := float64(d) / float64(time.Millisecond)
	switch {
	case f < 1:
		return fmt.Sprintf("%.2f ms", f)
	case f < 100:
		return fmt.Sprintf("%.1f ms", f)
	}
	return fmt.Sprintf("%.0f ms", f)
}

func perSec(f float64) string {
	if f >= 100 {
		return fmt.Sprintf("%.0f/s", f)
	}
	return fmt.Sprintf("%.1f/s", f)
}

func mib(b int64) string { return fmt.Sprintf("%.1f MB", float64(b)/(1<<20)) }

func ratio(figure, baseline float64) float64 {
	if baseline <= 0 {
		return 0
	}
	return figure / baseline
}

// times formats a ratio with two decimals, or with three where two would
// round it onto a one-decimal value such as a target's bound: 0.8987 is
// "0.899×", not a "0.90×" printed beside a MISS of "≥ 0.9×".
func times(x float64) string {
	two := math.Round(x*100) / 100
	if two != x && math.Abs(two*10-math.Round(two*10)) < 1e-9 {
		return fmt.Sprintf("%.3f×", x)
	}
	return fmt.Sprintf("%.2f×", x)
}

// verdict is PASS when ok holds, else MISS.
func verdict(ok bool) string {
	if ok {
		return "PASS"
	}
	return "MISS"
}
