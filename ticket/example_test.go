package ticket_test

import (
	"fmt"
	"strings"

	"ticketrelay/ticket"
)

func ExampleValidateRequestID() {
	for _, id := range []string{
		"7f0c2a4e-5b1d-4f7a-9e3c-1a2b3c4d5e6f",
		"",
		"has space",
		"naïve",
		strings.Repeat("k", 256),
	} {
		fmt.Println(ticket.ValidateRequestID(id))
	}
	// Output:
	// <nil>
	// invalid argument "request_id": is required (use a fresh UUID for each new ticket)
	// invalid argument "request_id": contains byte 0x20 at offset 3; only visible ASCII characters (no spaces) are allowed
	// invalid argument "request_id": contains byte 0xc3 at offset 2; only visible ASCII characters (no spaces) are allowed
	// invalid argument "request_id": is 256 bytes long; at most 255 are allowed
}
