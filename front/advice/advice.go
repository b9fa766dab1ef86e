// Package advice writes the words a request's status says to whoever reads
// it: the agent (find_request, a replayed or waiting create) and the
// operator's console read the same detail.
package advice

import (
	"fmt"
	"time"

	"ticketrelay/request"
)

// The words find_request (and a replayed or waiting create) says to the
// agent: what a request's status means and what to do next. The ledger
// and the cluster record report data only (request.Report); the
// words are written here, from the status, the failure's class
// (request.Failure) and what the running dispatchers serve.

// Advise is st's detail: what its status means and what to do next, and,
// for a request still on its way, whether anyone will deliver it.
func Advise(st request.Report) string {
	d := detail(st)
	if s := st.Served; s != nil && st.OnItsWay() {
		d += unserved(*s, st.Target) + blocked(*s)
	}
	return d
}

// detailUnknown is the detail of StatusUnknown. It names no tool: create
// tools are named by configuration.
const detailUnknown = "No request with this request_id has been stored: never accepted, still being stored by a call in progress, " +
	"or forgotten after its retention. Calling the same create tool again with the SAME request_id and arguments is always safe " +
	"(it never makes a second ticket); do not use a new request_id for this ticket."

// interruptedDetail is the detail of a request a call claimed in the
// cluster record and no host accepted (request.InterruptedStatus).
const interruptedDetail = "Not accepted yet: a call with this request_id was interrupted before it was accepted, or is being " +
	"accepted right now. Call the same create tool again with the SAME request_id and arguments: that completes it, " +
	"or returns its result, and never makes a second ticket. Do not use a new request_id."

func detail(st request.Report) string {
	switch st.Status {
	case request.StatusUnknown:
		if st.Interrupted {
			return interruptedDetail
		}
		return detailUnknown
	case request.StatusQueued:
		return "Accepted and stored; waiting to be handed to the delivery queue. Do not create it again."
	case request.StatusPublished:
		if st.InProgress {
			return fmt.Sprintf("Delivery attempt %d to %s is in progress. Do not create it again.", st.Attempts, st.Target)
		}
		return "Accepted and queued for delivery to " + st.Target + ". Do not create it again."
	case request.StatusDelivered:
		if st.ExternalID == "" {
			return "Delivered to " + st.Target + " (it returns no id for what it created)."
		}
		return "Delivered to " + st.Target + " as " + st.ExternalID + "."
	case request.StatusRetrying:
		return fmt.Sprintf("Attempt %d to %s failed (%s); it will be retried automatically. Do not create it again.",
			st.Attempts, st.Target, st.LastError)
	case request.StatusFailed:
		return failedDetail(st)
	case request.StatusUncertain:
		return uncertainDetail(st)
	}
	return ""
}

// failedDetail says what happened, by the failure's class, and what the
// agent and an operator can do next. It never says "permanently" of a
// request whose attempts may have reached the downstream.
func failedDetail(st request.Report) string {
	cmd := "`dispatcher redrive -data DIR " + st.OperatorName() + "`"
	redrive := "redrive it with " + cmd + ", which resends it under the same dedupe key."
	e := st.LastError
	switch st.Failure {
	case request.FailureRejected:
		return "Delivery to " + st.Target + " failed: " + st.Target + " rejected it (" + e + "). " +
			"If the error is about the ticket's content, fix the arguments and create it with a NEW request_id " +
			"(calling again with this one only repeats this answer). Otherwise (e.g. a configuration problem) do not create it again: " +
			"an operator can " + redrive
	case request.FailureAuth:
		return "Delivery to " + st.Target + " failed: " + st.Target + " refused ticketrelay's credentials (" + e + "). " +
			"An operator must fix them and can then " + redrive +
			" Do not create it again with a new request_id: once redriven, it would be a second ticket."
	case request.FailureExhausted:
		return "Delivery to " + st.Target + " stopped after its attempts were exhausted (" + e + "). " +
			"An attempt that timed out or got a server error may still have reached " + st.Target + ", so it may hold the ticket: " +
			"do not create it again with a new request_id. An operator can " + redrive
	case request.FailureSettled:
		return "An operator checked " + st.Target + " and settled this request as not delivered (" + e + "). " +
			"If it was already created again with a new request_id, nothing more is needed. Otherwise either create it with a NEW request_id, " +
			"or have an operator redrive this one with " + cmd + ": one of the two, not both."
	}
	return "Delivery to " + st.Target + " failed (" + e + "). An operator can " + redrive +
		" Do not create it again with a new request_id: " + st.Target + " may hold it (a timeout or server error may have reached it)."
}

// uncertainDetail names what to check, what an operator runs, and what the
// agent does if the downstream holds nothing.
func uncertainDetail(st request.Report) string {
	return "The outcome of an attempt to deliver to " + st.Target + " is unknown (" + st.LastError + "), and " + st.Target +
		" offers no way to check it automatically, so it is not resent. Check " + st.Target + " for ticket " + st.TicketID +
		" (look for its title) before creating it again. If it is there, do not create it again: an operator records it with " +
		"`dispatcher resolve -data DIR " + st.OperatorName() + " -delivered EXTERNAL_ID`. If it is not, create it with a NEW request_id " +
		"(calling again with this one only repeats this answer), and an operator settles this one with " +
		"`dispatcher resolve -data DIR " + st.OperatorName() + " -failed`."
}

// unserved is what the detail of a request still on its way to target
// adds when no running dispatcher delivers to it; "" when one does.
func unserved(s request.Served, target string) string {
	switch {
	case s.Dispatchers == 0:
		return fmt.Sprintf(" No dispatcher is running (none has renewed its entry in the last %s): it stays stored and "+
			"will be delivered once one runs. Tell the operator.", request.PresenceFresh)
	case !s.Serves(target):
		return fmt.Sprintf(" No running dispatcher delivers to %q: its configuration (-config) has no such target. It stays "+
			"stored and will be delivered once one does. Tell the operator: mcp-front and the dispatcher must be given "+
			"the same -config.", target)
	}
	return ""
}

// blocked is what the detail of a request still on its way adds while a
// running dispatcher cannot hand requests to the stream; "" otherwise.
func blocked(s request.Served) string {
	if s.BlockedSince.IsZero() {
		return ""
	}
	return fmt.Sprintf(" Delivery is blocked: the dispatcher cannot reach its delivery queue (the JetStream stream) since %s (%s). "+
		"The request stays stored and is handed over once the queue is back; the dispatcher keeps trying. "+
		"Tell the operator if this lasts.", s.BlockedSince.UTC().Format(time.RFC3339), s.BlockedReason)
}
