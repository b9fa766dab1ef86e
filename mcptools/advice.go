package mcptools

import (
	"ticketrelay/advice"
	"ticketrelay/ledger"
)

// Advise is st's detail (advice.Advise): the words are package advice's,
// so that the operator's console shows the detail the agent reads.
func Advise(st ledger.RequestStatus) string { return advice.Advise(st) }

// advised is st with its detail written.
func advised(st ledger.RequestStatus) ledger.RequestStatus {
	st.Detail = Advise(st)
	return st
}

// conflictAdvice is the tool error of a request_id first used with other
// arguments.
func conflictAdvice(c *ledger.ConflictError) string {
	return "idempotency_key_conflict: " + c.Error() + ". To create a new ticket use a fresh request_id; " +
		"to get the original result, repeat the original arguments or call find_request"
}

// otherSubjectAdvice is the tool error of a request_id that names another
// caller's request (ledger.ErrOtherSubject).
var otherSubjectAdvice = "idempotency_key_conflict: " + ledger.ErrOtherSubject.Error() + ". Use a fresh request_id"
