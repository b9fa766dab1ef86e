package downstream_test

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"ticketrelay/delivery/downstream"
)

func TestMarker(t *testing.T) {
	a, b := downstream.Marker("ns:req-1"), downstream.Marker("ns:req-2")
	if a == b || a != downstream.Marker("ns:req-1") {
		t.Fatalf("markers %q, %q: want stable and distinct per key", a, b)
	}
	if !strings.HasPrefix(a, "[ticketrelay:") || !strings.HasSuffix(a, "]") || len(a) != len("[ticketrelay:]")+24 {
		t.Fatalf("marker %q: want [ticketrelay: + 24 hex digits + ]", a)
	}
}

func TestFitComment(t *testing.T) {
	tail := "\n\n" + downstream.Marker("k")
	if got := downstream.FitComment("short\n\n", tail, 100); got != "short"+tail {
		t.Fatalf("FitComment of a short body = %q", got)
	}
	long := strings.Repeat("é", 500)
	got := downstream.FitComment(long, tail, 200)
	if n := utf8.RuneCountInString(got); n > 200 || !strings.HasSuffix(got, tail) || !strings.Contains(got, "the rest is cut") {
		t.Fatalf("FitComment of a long body: %d characters, %q…; want at most 200, cut said, ending with the tail", n, got[:40])
	}
}

func TestCheckUpdate(t *testing.T) {
	all := downstream.Fields
	labels := []string{" b ", "a", "b"}
	u, err := downstream.CheckUpdate("t", all, downstream.Update{Labels: &labels, Status: downstream.StatusClosed})
	if err != nil || strings.Join(*u.Labels, ",") != "a,b" || strings.Join(labels, ",") != " b ,a,b" {
		t.Fatalf("CheckUpdate = %+v, %v; want labels normalized in a copy", u, err)
	}
	empty := []string{}
	if u, err := downstream.CheckUpdate("t", all, downstream.Update{Labels: &empty}); err != nil || u.Labels == nil || len(*u.Labels) != 0 {
		t.Fatalf("clearing the labels: %+v, %v; want an empty set", u, err)
	}
	for _, c := range []struct {
		have []downstream.Field
		u    downstream.Update
		want string
	}{
		{all, downstream.Update{}, "must set at least one"},
		{[]downstream.Field{downstream.FieldStatus}, downstream.Update{Priority: "high"}, "cannot set priority"},
		{all, downstream.Update{Status: "resolved"}, `status "resolved"`},
		{all, downstream.Update{Priority: "critical"}, `priority "critical"`},
		{all, downstream.Update{Labels: &[]string{"ticketrelay-x"}}, "reserved"},
		{all, downstream.Update{Assignee: new(" jane")}, "assignee"},
	} {
		_, err := downstream.CheckUpdate("t", c.have, c.u)
		var e *downstream.Error
		if !errors.As(err, &e) || e.Class != downstream.Permanent || !strings.Contains(err.Error(), c.want) {
			t.Errorf("CheckUpdate(%+v) = %v; want a permanent error containing %q", c.u, err, c.want)
		}
	}
}

func TestCheckRef(t *testing.T) {
	for _, ok := range []string{"dlv_1", "ns:req-1", "https://x/1"} {
		if err := downstream.CheckRef("webhook", "h", ok); err != nil {
			t.Errorf("CheckRef(%q): %v", ok, err)
		}
	}
	for _, bad := range []string{"", "a b", strings.Repeat("x", 256), "a\x1bb", "a\u202eb"} {
		if err := downstream.CheckRef("webhook", "h", bad); err == nil || downstream.Classify(err).Class != downstream.Permanent {
			t.Errorf("CheckRef(%q) = %v; want permanent", bad, err)
		}
	}
}
