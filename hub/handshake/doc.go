// Package handshake completes the TLS handshakes of the hub's listener
// before the HTTP server sees a connection, a bounded number at a time and
// the newest first.
//
// When a hub restarts, every device reconnects within seconds. With a
// goroutine per connection, thousands of handshakes share the cores at
// once, each finishes late, many after their client gave up (client-go
// allows 10 s), and the work spent on those is lost while their clients
// come back for more: the storm feeds itself, and an administrator's own
// connection waits behind all of it. Here a bounded number of handshakes
// run at a time (hundreds: most of a handshake is waiting for the client),
// the newest connection is taken first (its client is still waiting), and
// one that waited longer than its client likely would is closed without
// the costly part of a handshake.
package handshake
