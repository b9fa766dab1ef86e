package mcptools

import (
	"fmt"

	"ticketrelay/request"
	"ticketrelay/ticket"
)

var createInputSchema = map[string]any{
	"type":                 "object",
	"additionalProperties": false,
	"required":             []string{"request_id", "title"},
	"properties": map[string]any{
		"request_id": map[string]any{
			"type": "string", "minLength": 1, "maxLength": ticket.MaxRequestIDLen, "pattern": `^[!-~]+$`,
			"description": fmt.Sprintf("Idempotency key chosen by you: a fresh UUID for each new ticket; the same value on every retry of it. "+
				"1 to %d visible ASCII characters, no spaces.", ticket.MaxRequestIDLen),
		},
		"title": map[string]any{
			"type": "string", "minLength": 1, "maxLength": ticket.MaxTitleLen,
			"description": fmt.Sprintf("One-line summary of the ticket: at most %d characters, no line breaks.", ticket.MaxTitleLen),
		},
		"body": map[string]any{
			// maxLength counts characters; the server's limit is in bytes
			// (a character takes 1 to 4), so the description gives the rule.
			"type": "string", "maxLength": ticket.MaxBodyLen,
			"description": fmt.Sprintf("Full description (plain text or Markdown). At most %d bytes (UTF-8): "+
				"fewer characters when it holds non-ASCII text.", ticket.MaxBodyLen),
		},
		"priority": map[string]any{
			"type": "string", "enum": ticket.Priorities, "default": ticket.DefaultPriority,
			"description": "Urgency of the ticket.",
		},
		"labels": map[string]any{
			"type": "array", "maxItems": ticket.MaxLabels,
			"items":       map[string]any{"type": "string", "minLength": 1, "maxLength": ticket.MaxLabelLen},
			"description": fmt.Sprintf("Tags for the ticket: at most %d, each at most %d characters.", ticket.MaxLabels, ticket.MaxLabelLen),
		},
		"fingerprint": fingerprintArg,
		"wait_for_delivery_seconds": map[string]any{
			"type": "integer", "minimum": 0, "maximum": MaxWaitForDelivery, "default": 0,
			"description": "Optional: after accepting the ticket, wait up to this many seconds for its delivery and answer with the status reached " +
				"(progress notifications report each change if you pass a progress token). Not part of the request: a retry may wait or not. " +
				"Keep it below your client's own time limit for a tool call: a call cut by the client was still accepted (find_request tells).",
		},
	},
}

// statuses lists every Status, in the order of DESIGN.md "Request status".
var statuses = []string{string(request.StatusUnknown), string(request.StatusQueued), string(request.StatusPublished),
	string(request.StatusDelivered), string(request.StatusRetrying), string(request.StatusFailed), string(request.StatusUncertain)}

func schemaString(desc string) map[string]any {
	return map[string]any{"type": "string", "description": desc}
}

func schemaTime(desc string) map[string]any {
	return map[string]any{"type": "string", "format": "date-time", "description": desc}
}

// Fields shared by the create tools' answer and find_request's.
var (
	requestIDOut    = schemaString("The request_id of the call, as given.")
	ticketIDOut     = schemaString("ticketrelay's id of the ticket, derived from request_id: the same on every repeat of the call.")
	targetOut       = schemaString("The target the ticket is delivered to.")
	externalIDOut   = schemaString("The target's id of the item it created, once delivered.")
	externalURLOut  = schemaString("A link to the item the target created, once delivered (if the target gives one).")
	detailOut       = schemaString("What the status means and what to do next.")
	callerOutSchema = map[string]any{"type": "object", "required": []string{"subject"},
		"description": "Who asked for the ticket, as recorded when it was accepted (absent for the caller without a token).",
		"properties": map[string]any{
			"subject": schemaString("The subject of the caller's token: a static token's name, or the signed-in user's issuer/sub."),
			"name":    schemaString("The display name the signed-in user's token carried, if any."),
			"email":   schemaString("The email the signed-in user's token carried, if any."),
		}}
)

var createOutputSchema = map[string]any{
	"type":     "object",
	"required": []string{"request_id", "ticket_id", "status", "replayed"},
	"properties": map[string]any{
		"request_id": requestIDOut,
		"ticket_id":  ticketIDOut,
		"target":     targetOut,
		"status": map[string]any{"type": "string", "enum": statuses,
			"description": "Where the request stands: queued when first accepted. A repeated call (replayed) and a call that waited " +
				"for delivery report the current status, as find_request does."},
		"replayed": map[string]any{"type": "boolean",
			"description": "true if an earlier call with the same request_id and arguments had already accepted the ticket: this call created nothing."},
		"created_at":   schemaTime("When the ticket was accepted (by the first call)."),
		"external_id":  externalIDOut,
		"external_url": externalURLOut,
		"detail":       detailOut,
		"caller":       callerOutSchema,
		"grouped":      groupedOut, "grouped_on": groupedOnOut, "occurrences": occurrencesOut,
	},
}

func schemaCount(desc string) map[string]any {
	return map[string]any{"type": "integer", "minimum": 0, "description": desc}
}

// findOutputSchema describes RequestStatus.
var findOutputSchema = map[string]any{
	"type":     "object",
	"required": []string{"request_id", "status", "detail"},
	"properties": map[string]any{
		"request_id": requestIDOut,
		"status": map[string]any{"type": "string", "enum": statuses,
			"description": "Where the request stands: unknown (nothing stored under this request_id), queued, published, " +
				"delivered, retrying, failed or uncertain. detail says what it means and what to do."},
		"ticket_id":       ticketIDOut,
		"tool":            schemaString("The create tool that accepted the request."),
		"target":          targetOut,
		"accepted_at":     schemaTime("When the request was accepted and stored."),
		"published_at":    schemaTime("When the request was handed to the delivery queue (JetStream)."),
		"attempts":        schemaCount("Delivery calls made to the target so far."),
		"throttled":       schemaCount("Of the attempts, how many the target's rate limit refused; they do not count toward the attempt limit."),
		"in_progress":     map[string]any{"type": "boolean", "description": "true while a delivery call to the target is running."},
		"next_attempt_at": schemaTime("When the next delivery attempt (or the lookup of an earlier one) is due."),
		"last_error":      schemaString("The error of the last attempt, as recorded."),
		"external_id":     externalIDOut,
		"external_url":    externalURLOut,
		"updated_at":      schemaTime("When the delivery record last changed."),
		"caller":          callerOutSchema,
		"detail":          detailOut,
		"kind":            map[string]any{"type": "string", "enum": []string{ticket.KindComment, ticket.KindUpdate}, "description": "For a comment or an update: which (absent for a create)."},
		"ticket":          schemaString("For a comment or an update: the ticket it acts on (its ticket_id, or the target's own key or URL)."),
		"comments":        actionsOut("For a ticket: the comments requested on it, oldest first, each with its status."),
		"updates":         actionsOut("For a ticket: the updates requested on it, oldest first, each with its status."),
		"fingerprint":     fingerprintOut, "grouped": groupedOut,
	},
}

func actionsOut(desc string) map[string]any {
	return map[string]any{"type": "array", "description": desc, "items": map[string]any{
		"type": "object", "required": []string{"request_id", "status"},
		"properties": map[string]any{"request_id": requestIDOut, "status": map[string]any{"type": "string", "enum": statuses}},
	}}
}
