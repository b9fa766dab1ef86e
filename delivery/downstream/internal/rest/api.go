package rest

import "ticketrelay/delivery/downstream"

// API is what an adapter of a REST API at a configured base URL holds
// besides its own settings: the base URL, checked, and the client that
// calls it, with the adapter's credentials registered for redaction.
type API struct {
	Base string // the endpoint without its trailing slash
	*Client
}

// NewAPI checks endpoint as BaseURL does (kind, name and example make its
// error say which target is wrong and what would be right) and builds the
// client (NewClient: a nil client or clock gets the default) that keeps
// secrets out of every error (Redact).
func NewAPI(kind, name, endpoint, example string, hc downstream.HTTPConfig, secrets ...downstream.Secret) (API, error) {
	base, err := BaseURL(kind, name, endpoint, example)
	if err != nil {
		return API{}, err
	}
	return API{Base: base, Client: NewClient(hc.HTTP, hc.Now).Redact(secrets...)}, nil
}
