// Package debiannats holds the tests of a dispatcher against the
// nats-server of Debian's package (2.9.10 on Debian 12), run as its own
// process, as an operator who ran `apt install nats-server` would: first
// start, stop, second start, a ticket delivered, or, for a server older
// than 2.10, the same one-line refusal at every start and nothing written
// to the server; and the way forward from a stream a ticketrelay made on
// such a server before it refused them (upgrade the server, keep its store,
// start again). They run with TICKETRELAY_DEBIAN_NATS set to the server's
// binary (make test-debian-nats) and skip otherwise. It has no code of its
// own, only tests.
package debiannats
