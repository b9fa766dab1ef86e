package torture_test

import (
	"slices"
	"strings"
	"testing"

	"ticketrelay/testkit/torture"
)

// goodPowerCutInput is goodInput as a power-cut run with two cuts saw it:
// k1 and k2 were delivered before the first cut, and a lazy nats-server
// lost k3's message before its delivery, which the audit published again
// (generation 1).
func goodPowerCutInput(lazy bool) torture.Input {
	in := goodInput()
	in.PowerCut = &torture.PowerCutInput{
		Lazy:          lazy,
		Cuts:          []torture.CutStats{{N: 1, Acked: 2, LedgerRows: 2, Integrity: "ok"}, {N: 2, Acked: 4, LedgerRows: 4, Integrity: "ok"}},
		Acked:         4,
		DeliveredAt:   map[string]torture.DeliveredMark{},
		StreamLost:    map[string]bool{},
		StreamChecked: 4,
	}
	for _, id := range []string{k1, k2} {
		d := in.DB.Rows[id].Delivery
		in.PowerCut.DeliveredAt[id] = torture.DeliveredMark{Cut: 1, Attempts: d.Attempts, ExternalID: d.ExternalID, Items: 1, Applied: 1}
	}
	if lazy {
		in.PowerCut.StreamLost[k3] = true
		in.PowerCut.Cuts[1].StreamLost, in.PowerCut.Cuts[1].StreamPending = 1, 1
		in.PowerCut.StreamViolations = []string{"cut 2: " + k3 + ": published (acknowledged by the stream at sequence 3, generation 0) before the cut, not in the stream after it"}
		in.DB.Rows[k3].Generation = 1
	}
	return in
}

func TestCheckPowerCut(t *testing.T) {
	for _, tc := range []struct {
		name   string
		lazy   bool
		break_ func(in *torture.Input)
		want   []string
		says   []string
	}{
		{name: "good run, sync_interval always"},
		{
			// The lazy server loses a message: the run says so, and the
			// audit's republish is no disagreement.
			name: "lazy server, the audit recovered the lost message",
			lazy: true,
			want: []string{"stream-durable"},
			says: []string{k3 + ": published (acknowledged by the stream"},
		},
		{
			name: "an acknowledged request lost by a cut",
			break_: func(in *torture.Input) {
				in.PowerCut.Cuts[1].Lost = 1
				in.PowerCut.Violations = append(in.PowerCut.Violations, "cut 2: "+k2+": acknowledged to a client before the cut, not in the ledger after it")
			},
			want: []string{"power-cut"},
			says: []string{k2 + ": acknowledged to a client before the cut"},
		},
		{
			name: "delivered before a cut, sent again after it",
			break_: func(in *torture.Input) {
				m := in.PowerCut.DeliveredAt[k2]
				m.Applied = 0
				in.PowerCut.DeliveredAt[k2] = m
				in.DB.Rows[k1].Delivery.Attempts = 2
			},
			want: []string{"power-cut"},
			says: []string{k2 + ": delivered at cut 1, sent again after it", k1 + ": delivered as \"dlv_1\" after 1 attempts at cut 1; at the end delivered as \"dlv_1\" after 2 attempts"},
		},
		{
			name: "lazy server, the audit missed the lost message",
			lazy: true,
			break_: func(in *torture.Input) {
				in.DB.Rows[k3].Generation = 0
			},
			want: []string{"power-cut", "stream-durable"},
			says: []string{k3 + ": the stream lost its message before delivery, and the audit did not publish it again"},
		},
		{
			name: "the stream misses a message at the end it never lost at a cut",
			break_: func(in *torture.Input) {
				in.PowerCut.StreamEnd = []string{k1 + " (sequence 1, generation 0)"}
			},
			want: []string{"stream-durable"},
			says: []string{"at the end the stream does not hold the message of published " + k1},
		},
		{
			name: "republished without a loss",
			break_: func(in *torture.Input) {
				in.DB.Rows[k3].Generation = 1
			},
			want: []string{"records-agree"},
			says: []string{k3 + ": published again 1 times, though the stream lost nothing"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := goodPowerCutInput(tc.lazy)
			if tc.break_ != nil {
				tc.break_(&in)
			}
			res := torture.Check(in)
			if n := len(res.Properties); n != 13 {
				t.Errorf("%d properties, want 13 (11 and power-cut, stream-durable)", n)
			}
			names, vs := failing(res)
			if !slices.Equal(names, tc.want) {
				t.Errorf("failing properties %v, want %v; violations:\n%s", names, tc.want, vs)
			}
			for _, s := range tc.says {
				if !strings.Contains(vs, s) {
					t.Errorf("no violation says %q; violations:\n%s", s, vs)
				}
			}
			lines := strings.Join(res.Lines(10), "\n")
			if tc.lazy && tc.break_ == nil && !strings.Contains(lines, "published again by the audit: 1 then delivered") {
				t.Errorf("the report does not count the recovered message:\n%s", lines)
			}
			if t.Failed() {
				t.Log(lines)
			}
		})
	}
}
