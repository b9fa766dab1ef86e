package torture_test

import (
	"strings"
	"testing"
	"time"

	"ticketrelay/testkit/torture"
)

// nodeFaultRun is the history of a node-faults-only run reduced to what
// the two properties of that pattern read: the fault phase, accepted calls
// every second, and the host removed for good after the phase (h3),
// adopted after its removal. gapAt, if not zero, leaves out the calls of
// the 11 s after it (12 s between two accepted calls).
func nodeFaultRun(gapAt time.Duration, extra ...torture.Event) torture.MultiInput {
	t0 := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	ev := []torture.Event{{At: t0, Kind: torture.KindPhase, Detail: "faults started"}}
	for s := time.Second; s < 30*time.Second; s += time.Second {
		if gapAt > 0 && s > gapAt && s < gapAt+12*time.Second {
			continue
		}
		ev = append(ev, torture.Event{At: t0.Add(s), Kind: torture.KindCall, Mode: torture.ModeNormal, Outcome: torture.OutAccepted, RequestID: "r"})
	}
	ev = append(ev,
		torture.Event{At: t0.Add(30 * time.Second), Kind: torture.KindPhase, Detail: "fault phase over"},
		torture.Event{At: t0.Add(35 * time.Second), Kind: torture.KindFault, Component: "h3", Cause: torture.CauseRemoved},
		torture.Event{At: t0.Add(52 * time.Second), Kind: torture.KindHostState, Component: "h3", Cause: "adopting", Detail: "by h1"},
		torture.Event{At: t0.Add(53 * time.Second), Kind: torture.KindHostState, Component: "h3", Cause: "adopted", Detail: "by h1"})
	for _, e := range extra {
		e.At = t0.Add(time.Duration(e.Attempt) * time.Second)
		e.Attempt = 0
		ev = append(ev, e)
	}
	return torture.MultiInput{Input: torture.Input{Events: ev}, Hosts: []string{"h1", "h2"}, Lost: "h3", NodeFaultsOnly: true, HostDeadAfter: 15 * time.Second}
}

func propertyOf(t *testing.T, in torture.MultiInput, name string) torture.Property {
	t.Helper()
	res, _ := torture.CheckMulti(in)
	for _, p := range res.Properties {
		if p.Name == name {
			return p
		}
	}
	t.Fatalf("no property %s", name)
	return torture.Property{}
}

func TestCheckNodeFaultProperties(t *testing.T) {
	for _, name := range []string{"no-live-host-adopted", "no-refusal-beyond-failover"} {
		if p := propertyOf(t, nodeFaultRun(0), name); !p.OK {
			t.Errorf("%s fails a good run: %s %v", name, p.Summary, p.Violations)
		}
	}
	// A live host marked adopting during the faults, and the lost host
	// marked before its removal: both adoptions of a live host.
	bad := nodeFaultRun(0,
		torture.Event{Attempt: 12, Kind: torture.KindHostState, Component: "h2", Cause: "adopting", Detail: "by h1"},
		torture.Event{Attempt: 20, Kind: torture.KindHostState, Component: "h3", Cause: "adopted", Detail: "by h2"})
	if p := propertyOf(t, bad, "no-live-host-adopted"); p.OK || len(p.Violations) != 2 || !strings.Contains(p.Violations[0], "h2") {
		t.Errorf("no-live-host-adopted of a run that adopted live hosts: %+v", p)
	}
	// The lost host's adoption unseen (the watcher saw nothing), or later
	// than the bound (15 s + five periods of 2.5 s).
	unseen := nodeFaultRun(0)
	unseen.Events = unseen.Events[:len(unseen.Events)-2]
	if p := propertyOf(t, unseen, "no-live-host-adopted"); p.OK || !strings.Contains(p.Violations[0], "no adoption of the host lost for good (h3) was seen") {
		t.Errorf("no-live-host-adopted of a run whose loss was never seen adopted: %+v", p)
	}
	late := nodeFaultRun(0)
	late.HostDeadAfter = 5 * time.Second
	if p := propertyOf(t, late, "no-live-host-adopted"); p.OK || !strings.Contains(p.Violations[0], "adopted 17s after its loss, beyond the bound of 9.166666666s") {
		t.Errorf("no-live-host-adopted of a run whose loss was adopted late: %+v", p)
	}
	// Acceptance stopped for 12 s, beyond the 10 s bound.
	if p := propertyOf(t, nodeFaultRun(8*time.Second), "no-refusal-beyond-failover"); p.OK || !strings.Contains(p.Violations[0], "no create accepted for 12s") {
		t.Errorf("no-refusal-beyond-failover of a run that stopped acceptance for 12 s: %+v", p)
	}
	// A live host refused for its dispatcher.
	refused := nodeFaultRun(0, torture.Event{Attempt: 5, Kind: torture.KindCall, Outcome: torture.OutNotStored, RequestID: "x",
		Err: "the ticket was not accepted: this ticketrelay host cannot deliver right now (its dispatcher is not running)"})
	if p := propertyOf(t, refused, "no-refusal-beyond-failover"); p.OK || len(p.Violations) != 1 {
		t.Errorf("no-refusal-beyond-failover of a run with a refusal: %+v", p)
	}
	// Without the pattern, the properties are not checked.
	other := nodeFaultRun(8 * time.Second)
	other.NodeFaultsOnly = false
	res, _ := torture.CheckMulti(other)
	for _, p := range res.Properties {
		if p.Name == "no-refusal-beyond-failover" || p.Name == "no-live-host-adopted" {
			t.Errorf("%s checked in a run with host faults", p.Name)
		}
	}
}
