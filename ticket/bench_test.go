package ticket_test

import (
	"strings"
	"testing"

	"ticketrelay/ticket"
)

func benchRequest() ticket.Request {
	return ticket.Request{
		RequestID: "5f0c7c9e-8a1b-4e53-9d1a-3f6f2b7c4a10",
		Tool:      "create_ticket", Target: "local",
		Title:    "Nightly export failed on worker-3",
		Body:     strings.Repeat("The nightly export job failed with `context deadline exceeded`. ", 5),
		Priority: "high", Labels: []string{" nightly", "export", "nightly"},
	}
}

// BenchmarkHash is the canonical argument hash every create computes.
func BenchmarkHash(b *testing.B) {
	r := benchRequest()
	if err := r.Normalize(); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		_ = r.Hash()
	}
}

// BenchmarkNormalize is the validation every create_ticket call runs.
func BenchmarkNormalize(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		r := benchRequest()
		if err := r.Normalize(); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkIDFor(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		_ = ticket.IDFor("5f0c7c9e-8a1b-4e53-9d1a-3f6f2b7c4a10")
	}
}
