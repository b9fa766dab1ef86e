package downstream

import (
	"net/http"
	"time"
)

// HTTPConfig is the part of an HTTP adapter's Config that says how it
// calls its API; each such Config embeds it.
type HTTPConfig struct {
	// HTTP is the client (nil: a client with a 20s timeout).
	HTTP *http.Client
	// Now is the clock (nil: time.Now): for Retry-After dates, and for
	// what the adapter dates itself (a webhook-timestamp, the age of a
	// ticket before a lookup, a rate limit's reset time).
	Now func() time.Time
}
