package request

import (
	"time"

	"ticketrelay/store/outbox"
	"ticketrelay/ticket"
)

// Delivery states a store keeps beside the Status values. "attempting" is
// recorded before a call to a downstream without a dedupe key, so that a
// crash during the call is never followed by a blind second call.
const (
	DeliveryAttempting = "attempting"
)

// Delivery is the forwarder's record of a request's delivery.
type Delivery struct {
	RequestID     string
	Target        string
	State         string // DeliveryAttempting or a Status: delivered, retrying, failed, uncertain
	Attempts      int
	Throttled     int // of Attempts, calls the downstream refused for its rate limit
	NextAttemptAt time.Time
	LastError     string
	Failure       Failure // why a failed delivery failed; "" otherwise
	ExternalID    string
	ExternalURL   string
	UpdatedAt     time.Time
	// Attempt is the downstream call this write ends, kept in the
	// request's attempts history; nil: the write ends no call.
	Attempt *Attempt
	// Version is the record's version as read; 0: there is no record yet.
	// Each write makes it one higher; a write at another version is
	// refused with ErrStale.
	Version int64
}

// Counted is how many of the attempts count toward the attempt limit: those
// the downstream did not refuse for its rate limit.
func (d Delivery) Counted() int { return d.Attempts - d.Throttled }

// Settled reports whether the delivery needs no further call downstream.
func (d Delivery) Settled() bool {
	switch Status(d.State) {
	case StatusDelivered, StatusFailed, StatusUncertain:
		return true
	}
	return false
}

// Prior is what the forwarder reads before an attempt.
type Prior struct {
	// Accepted: the store holds the request, and Ticket is the ticket it
	// holds (the message names it; see ticket.Ref).
	Accepted bool
	Ticket   ticket.Ticket
	// Found: the request has a delivery record, Delivery. Delivery's
	// RequestID is set either way.
	Found    bool
	Delivery Delivery
	// For a comment or an update on a ticket ticketrelay filed
	// (Ticket.On): OnAccepted, the store holds that create, and OnDelivery
	// is its delivery record (State "": none yet).
	OnAccepted bool
	OnDelivery Delivery
	// EarlierUpdate: the request is an update of a ticket ticketrelay
	// filed, and an update of that ticket the store accepted before it is
	// not settled yet (decision 0184).
	EarlierUpdate bool
}

// Action is a comment or an update as find_request lists it under the
// ticket it acts on.
type Action struct {
	RequestID string `json:"request_id"` // as its caller gave it
	Status    Status `json:"status"`
}

// MaxActionsShown bounds the comments, and the updates, a report lists.
const MaxActionsShown = 100

// MaxPriorBatch bounds the request ids one batched read of Priors takes.
const MaxPriorBatch = 64

// Published is an outbox row as the stream audit sees it, with its
// request's delivery record.
type Published struct {
	outbox.Row
	Target string
	// Delivery is the state of the request's delivery record ("": none
	// yet), DeliveryUpdated when it was last written.
	Delivery        string
	DeliveryUpdated time.Time
}

// Settled reports whether the request's delivery needs nothing more.
func (p Published) Settled() bool { return Delivery{State: p.Delivery}.Settled() }

// PresenceFresh is how old a dispatcher's entry may be and still stand
// for a running dispatcher: three renewals missed (a dispatcher renews its
// entry every maintenance.PresenceInterval).
const PresenceFresh = 30 * time.Second

// Served is what the running dispatchers deliver to.
type Served struct {
	Dispatchers int             // entries renewed within PresenceFresh
	Targets     map[string]bool // the union of their targets
	// BlockedSince is when the earliest of them found the stream
	// unavailable (zero: none has), BlockedReason why.
	BlockedSince  time.Time
	BlockedReason string
}

// Serves reports whether a running dispatcher delivers to target.
func (s Served) Serves(target string) bool { return s.Targets[target] }

// Attempt is one call to a downstream, as the attempts history keeps it.
type Attempt struct {
	At         time.Time
	Attempt    int    // the attempt count after it (throttled calls count)
	Outcome    string // the delivery state it led to
	HTTPStatus int    // 0: no HTTP answer
	Class      string // the downstream error's class; "" once delivered
	Error      string
	Latency    time.Duration
	Host       string
}
