package mcptools_test

import (
	"context"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/prometheus/client_golang/prometheus"

	"ticketrelay/delivery/downstream"
	"ticketrelay/front/mcptools"
	"ticketrelay/metrics"
	"ticketrelay/testkit/fixture"
)

// add_comment's idempotentHint follows from its targets' comment
// capabilities: set where every target's comments are keyed or looked up
// consistently, not where one target's are not. update_ticket's is set:
// an update sets values. A configuration whose targets take neither
// serves neither tool.
func TestBeyondAnnotationsFollowCapabilities(t *testing.T) {
	keyed := mcptools.Beyond{Comments: true, CommentsIdempotent: true, UpdateFields: downstream.Fields}
	eventual := mcptools.Beyond{Comments: true}
	for _, c := range []struct {
		name       string
		beyond     map[string]mcptools.Beyond
		idem, both bool
	}{
		{"keyed and consistent", map[string]mcptools.Beyond{keyedTarget: keyed, unkeyedTgt: keyed}, true, true},
		{"one eventual", map[string]mcptools.Beyond{keyedTarget: keyed, unkeyedTgt: eventual}, false, true},
		{"none", nil, false, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			tools := listBeyond(t, c.beyond)
			a, u := tools[mcptools.AddCommentTool], tools[mcptools.UpdateTicketTool]
			if !c.both {
				if a != nil || u != nil {
					t.Fatalf("tools served without a target that takes them: %v %v", a, u)
				}
				return
			}
			if a == nil || u == nil {
				t.Fatalf("add_comment %v, update_ticket %v: want both", a, u)
			}
			if a.Annotations.IdempotentHint != c.idem || a.Annotations.ReadOnlyHint {
				t.Errorf("add_comment annotations %+v, want idempotentHint %v", a.Annotations, c.idem)
			}
			if !u.Annotations.IdempotentHint {
				t.Errorf("update_ticket annotations %+v, want idempotentHint", u.Annotations)
			}
		})
	}
}

func listBeyond(t *testing.T, beyond map[string]mcptools.Beyond) map[string]*mcp.Tool {
	t.Helper()
	m := metrics.NewFront(prometheus.NewRegistry())
	l := fixture.NewLedger(t, fixture.WriterMetrics(m.Writer))
	srv, err := mcptools.New(mcptools.Config{Version: "test", Beyond: beyond, Bindings: []mcptools.Binding{
		{Tool: keyedTool, Target: keyedTarget, Kind: "local"}, {Tool: unkeyedTool, Target: unkeyedTgt, Kind: "webhook"}},
	}, l.Ledger, m, testLogger())
	if err != nil {
		t.Fatal(err)
	}
	e := &env{srv: srv}
	res, err := e.connect(t).ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*mcp.Tool{}
	for _, tl := range res.Tools {
		out[tl.Name] = tl
	}
	return out
}
