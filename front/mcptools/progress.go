package mcptools

import (
	"context"
	"fmt"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"ticketrelay/request"
	"ticketrelay/ticket"
)

// MaxWaitForDelivery bounds the create tools' wait_for_delivery_seconds. It
// stays well under the 60 seconds that Claude Code's HTTP client allows
// before the first byte of an answer, so a wait never turns into a timeout.
const MaxWaitForDelivery = 45

// Poll intervals of the wait: quick at first, then at most once a second.
const (
	firstPoll = 50 * time.Millisecond
	maxPoll   = time.Second
)

func settled(s request.Status) bool {
	switch s {
	case request.StatusDelivered, request.StatusFailed, request.StatusUncertain:
		return true
	}
	return false
}

func checkWait(seconds int) error {
	if seconds < 0 || seconds > MaxWaitForDelivery {
		return &ticket.InvalidError{Argument: "wait_for_delivery_seconds", Reason: fmt.Sprintf("must be between 0 and %d", MaxWaitForDelivery)}
	}
	return nil
}

// awaitDelivery polls the request's status until it is delivered, failed or
// uncertain, the wait is over, or the caller cancels. If the caller passed a
// progress token, every change of status (the first one included) is sent as
// notifications/progress. The answer carries the latest status seen. Waiting
// reads only: the request was accepted (or replayed) before it began, so a
// call that gives up waiting has still created its ticket exactly once.
func (s *Server) awaitDelivery(ctx context.Context, req *mcp.CallToolRequest, subject string, res request.Result, wait time.Duration) createResult {
	out := createResult{Result: res}
	var token any
	if req.Params != nil {
		token = req.Params.GetProgressToken()
	}
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	poll := firstPoll
	var last request.Status
	sent := 0
	for {
		st, err := s.ledger.Find(ctx, subject, res.RequestID)
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn("wait for delivery: status read failed", "request_id", res.RequestID, "err", err)
			}
		} else {
			out.now(st)
			if st.Status != last {
				last = st.Status
				if token != nil && req.Session != nil {
					sent++
					msg := string(st.Status)
					if out.Detail != "" {
						msg += ": " + out.Detail
					}
					if err := req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{
						ProgressToken: token, Progress: float64(sent), Message: msg,
					}); err != nil {
						s.log.Debug("progress notification not delivered", "request_id", res.RequestID, "err", err)
					}
				}
			}
			if settled(st.Status) {
				return out
			}
		}
		t := time.NewTimer(poll)
		select {
		case <-ctx.Done():
			t.Stop()
			return out
		case <-deadline.C:
			t.Stop()
			return out
		case <-t.C:
		}
		poll = min(2*poll, maxPoll)
	}
}
