// Package oauth holds the tests of signing in against a real OAuth
// authorization server: Ory Hydra (built from testkit/tools/hydra into a
// cache by make test-oauth), in memory, on loopback ports chosen at run
// time, with a login-and-consent app of the tests that signs a test user in
// and grants the scope and this resource as the audience. The go-sdk's
// AuthorizationCodeHandler completes discovery, dynamic client
// registration, PKCE and the code exchange against mcp-front given only its
// URL, then files tickets as that user; Claude Code reports the server as
// needing authentication, and connects with a static token. The
// dispatcher's console signs an operator in at Hydra as a confidential
// client and refuses a user without the operator scope. They run with
// TICKETRELAY_HYDRA (and TICKETRELAY_CLAUDE) naming the binaries (make
// test-oauth) and skip otherwise. It has no code of its own, only tests.
package oauth
