package mcptools

import (
	"ticketrelay/front/advice"
	"ticketrelay/request"
)

// RequestStatus is find_request's answer: where the request stands, as
// the ledger or the cluster record reports it, and the detail written
// here from it.
type RequestStatus struct {
	request.Report
	// Detail says what the status means and what to do next.
	Detail string `json:"detail"`
}

// advised is st's answer, with its detail written.
func advised(st request.Report) RequestStatus {
	return RequestStatus{Report: st, Detail: advice.Advise(st)}
}

// conflictAdvice is the tool error of a request_id first used with other
// arguments.
func conflictAdvice(c *request.ConflictError) string {
	return "idempotency_key_conflict: " + c.Error() + ". To create a new ticket use a fresh request_id; " +
		"to get the original result, repeat the original arguments or call find_request"
}

// otherSubjectAdvice is the tool error of a request_id that names another
// caller's request (request.ErrOtherSubject).
var otherSubjectAdvice = "idempotency_key_conflict: " + request.ErrOtherSubject.Error() + ". Use a fresh request_id"
