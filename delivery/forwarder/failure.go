package forwarder

import (
	"ticketrelay/delivery/downstream"
	"ticketrelay/request"
)

// failureOf is the class recorded with a delivery that failed for good on
// e (request.Failure): what find_request advises depends on it, so it is
// written as data from the error's class and status, never read back
// from the error's text.
func failureOf(e *downstream.Error) request.Failure {
	switch {
	case e.Class == downstream.Auth:
		return request.FailureAuth
	case e.Class == downstream.Permanent && e.StatusCode >= 400 && e.StatusCode < 500:
		// Refused by the downstream: maybe for the ticket's content.
		return request.FailureRejected
	}
	return request.FailurePermanent
}
