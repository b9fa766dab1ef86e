// Package pagerdutytest is an httptest fake of the PagerDuty Events API v2,
// keeping its documented contract:
//   - POST /v2/enqueue with routing_key (32 characters), event_action
//     trigger|acknowledge|resolve, payload{summary, source, severity} for a
//     trigger → 202 {"status":"success","message":"Event processed","dedup_key"}
//   - an invalid event → 400 {"status":"invalid event","message":"Event object
//     is invalid","errors":[...]}; a routing key of the right length that
//     belongs to no integration → 400 "Invalid routing key"
//   - dedup_key: a trigger whose key names an open alert applies to it (no
//     new alert); after a resolve, the same key opens a new alert
package pagerdutytest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"ticketrelay/downstream/downstreamtest"
)

// Alert is one alert.
type Alert struct {
	DedupKey string
	Summary  string
	Source   string
	Severity string
	Open     bool
	Events   int // trigger events applied to it
}

// Fake is one PagerDuty service with one Events API v2 integration.
type Fake struct {
	Faults     downstreamtest.Faults
	routingKey string
	srv        string

	mu     sync.Mutex
	alerts []*Alert
}

// New starts a service whose integration key is routingKey (32 characters).
func New(t testing.TB, routingKey string) *Fake {
	if len(routingKey) != 32 {
		t.Fatalf("pagerdutytest: a routing key has 32 characters, not %d", len(routingKey))
	}
	f := &Fake{routingKey: routingKey}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v2/enqueue", func(w http.ResponseWriter, r *http.Request) { f.Faults.Serve(w, r, f.enqueue) })
	f.srv = downstreamtest.StartServer(t, mux).URL
	return f
}

// URL is the Events API base URL.
func (f *Fake) URL() string { return f.srv }

// Count is the number of alerts ever opened.
func (f *Fake) Count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.alerts)
}

// Alerts returns copies of the alerts.
func (f *Fake) Alerts() []Alert {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]Alert, len(f.alerts))
	for i, a := range f.alerts {
		out[i] = *a
	}
	return out
}

func invalid(w http.ResponseWriter, errs ...string) {
	downstreamtest.WriteJSON(w, http.StatusBadRequest, map[string]any{"status": "invalid event", "message": "Event object is invalid", "errors": errs})
}

func (f *Fake) enqueue(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	var ev struct {
		RoutingKey  string `json:"routing_key"`
		EventAction string `json:"event_action"`
		DedupKey    string `json:"dedup_key"`
		Payload     *struct {
			Summary  string `json:"summary"`
			Source   string `json:"source"`
			Severity string `json:"severity"`
		} `json:"payload"`
	}
	if err := json.Unmarshal(body, &ev); err != nil {
		downstreamtest.WriteJSON(w, http.StatusBadRequest, map[string]any{
			"status": "Unrecognized object", "message": "Event object format is unrecognized", "errors": []string{"JSON parse error"}})
		return
	}
	if len(ev.RoutingKey) != 32 {
		invalid(w, "Length of 'routing_key' is incorrect (should be 32 characters)")
		return
	}
	if ev.RoutingKey != f.routingKey {
		invalid(w, "Invalid routing key")
		return
	}
	if len(ev.DedupKey) > 255 {
		invalid(w, "'dedup_key' is too long (maximum is 255 characters)")
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	open := func(key string) *Alert {
		for _, a := range f.alerts {
			if a.Open && a.DedupKey == key {
				return a
			}
		}
		return nil
	}
	switch ev.EventAction {
	case "trigger":
		var errs []string
		if ev.Payload == nil || strings.TrimSpace(ev.Payload.Summary) == "" {
			errs = append(errs, "'payload.summary' is missing or blank")
		}
		if ev.Payload == nil || strings.TrimSpace(ev.Payload.Source) == "" {
			errs = append(errs, "'payload.source' is missing or blank")
		}
		if ev.Payload == nil || !oneOf(ev.Payload.Severity, "critical", "error", "warning", "info") {
			errs = append(errs, "'payload.severity' must be one of critical, error, warning, info")
		}
		if len(errs) > 0 {
			invalid(w, errs...)
			return
		}
		key := ev.DedupKey
		if key == "" {
			key = fmt.Sprintf("generated-%d", len(f.alerts)+1)
		}
		if a := open(key); a != nil {
			a.Events++
		} else {
			f.alerts = append(f.alerts, &Alert{DedupKey: key, Summary: ev.Payload.Summary, Source: ev.Payload.Source,
				Severity: ev.Payload.Severity, Open: true, Events: 1})
		}
		ev.DedupKey = key
	case "acknowledge", "resolve":
		if ev.DedupKey == "" {
			invalid(w, "'dedup_key' is required for "+ev.EventAction)
			return
		}
		if a := open(ev.DedupKey); a != nil && ev.EventAction == "resolve" {
			a.Open = false
		}
	default:
		invalid(w, "'event_action' must be one of trigger, acknowledge, resolve")
		return
	}
	downstreamtest.WriteJSON(w, http.StatusAccepted, map[string]string{"status": "success", "message": "Event processed", "dedup_key": ev.DedupKey})
}

func oneOf(s string, set ...string) bool {
	for _, x := range set {
		if s == x {
			return true
		}
	}
	return false
}
