package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
)

// commentScenario measures add_comment's throughput against
// create_ticket's on one mcp-front (issue 35). The one place its number is
// written: other scenarios of the issue take numbers of their own.
const commentScenario = 14

const commentTool = "add_comment"

// commentBody is a typical agent's follow-up on a ticket (~200 bytes).
const commentBody = "Seen again on worker-3 at 03:10 UTC: the export retried twice and gave up with the same " +
	"`context deadline exceeded`. The upstream API's status page shows degraded performance since 02:55 UTC."

// filedSource makes new creates as freshSource does and remembers their
// request ids: the tickets commentSource comments on.
type filedSource struct {
	fresh freshSource
	mu    sync.Mutex
	ids   []string
}

func (s *filedSource) next(session int) (Args, bool) {
	a, ok := s.fresh.next(session)
	s.mu.Lock()
	s.ids = append(s.ids, a.RequestID)
	s.mu.Unlock()
	return a, ok
}

func (s *filedSource) filed() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.ids...)
}

// commentSource makes new comments, each with a fresh request_id, on the
// tickets of its list, as agents add what they find to tickets they filed.
type commentSource struct {
	mu      sync.Mutex
	rng     *rand.Rand
	tickets []string
}

func (s *commentSource) next(int) (Args, bool) {
	s.mu.Lock()
	t := s.tickets[s.rng.IntN(len(s.tickets))]
	s.mu.Unlock()
	return Args{RequestID: newUUID(), Ticket: t, Body: commentBody}, true
}

// scenario14 runs create_ticket and add_comment on one mcp-front at n
// sessions, in alternated windows (create, comment, create, …), the
// comments on tickets created in the warm-up and the create windows, and
// reports add_comment's throughput against create_ticket's.
func (r *runner) scenario14(ctx context.Context, n int) error {
	_, front, s, err := r.frontSessions(ctx, "mcp-front-comments", "s14", n)
	if err != nil {
		return err
	}
	defer front.stop()
	defer s.close()
	filed := &filedSource{}
	if _, err := s.run(ctx, load{tool: createTool, src: filed, measure: r.cfg.Warmup}); err != nil {
		return err
	}
	comments := &commentSource{rng: rand.New(rand.NewPCG(13, 35))}
	if comments.tickets = filed.filed(); len(comments.tickets) == 0 {
		return fmt.Errorf("bench: scenario %d: the warm-up created no ticket to comment on", commentScenario)
	}
	if _, err := s.run(ctx, load{tool: commentTool, src: comments, measure: r.cfg.Warmup}); err != nil {
		return err
	}
	create, comment := &outcome{}, &outcome{}
	for round := range r.cfg.Rounds {
		o, err := s.run(ctx, r.profileRound(r.timed(createTool, filed, front), front, round, "mcp-front-create"))
		if err != nil {
			return err
		}
		create.merge(o)
		comments.mu.Lock()
		comments.tickets = filed.filed()
		comments.mu.Unlock()
		if o, err = s.run(ctx, r.profileRound(r.timed(commentTool, comments, front), front, round, "mcp-front-comment")); err != nil {
			return err
		}
		comment.merge(o)
	}
	rt := ratio(comment.throughput(), create.throughput())
	result := verdict(rt >= 0.9)
	if create.errors+comment.errors > 0 {
		result = "ERR"
	}
	r.rep.add(row{fmt.Sprint(commentScenario), fmt.Sprintf("add_comment against create_ticket, %d sessions", n),
		fmt.Sprintf("one mcp-front, no dispatcher; comments on the run's own tickets (%d of them at the end), fresh request ids; %s",
			len(comments.tickets), r.rounds()),
		perSec(comment.throughput()), perSec(create.throughput()) + " create_ticket", times(rt), "≥ 0.9×", result})
	r.rep.detail("%s", describe(fmt.Sprintf("%d add_comment @%d", commentScenario, n), comment, "mcp-front"))
	r.rep.detail("%s", describe(fmt.Sprintf("%d create_ticket @%d", commentScenario, n), create, "mcp-front"))
	s.close()
	return stopAll(front)
}
