// Package tunnel carries a device's requests to its hub on one tunnel
// (agentapi.PathTunnel) instead of an HTTP/2 connection.
//
// Transport is an http.RoundTripper that sits under client-go's header
// wrappers (rest.Config.Wrap), over the device's net/http transport. It
// opens the tunnel with that transport's TLS configuration and dialer
// (its client certificate, rotated as client-go rotates it; its TLS
// session cache; the hubs it fails over between), over HTTP/1.1, and
// sends every request through it as HTTP/1.1 puts it on the wire; each
// answer is a response like any other, its body streamed as it comes, so
// that watches work as they do over HTTP/2.
//
// What a tunnel saves is the hub's: over HTTP/2 a device costs the hub
// three goroutines and tens of kilobytes of buffers and header tables;
// over a tunnel, one goroutine reading it.
//
// A hub that answers the tunnel's request with anything but 101 (an
// older hub, a proxy in the way) is sent the device's requests over the
// base transport, and asked again after a while. A tunnel that breaks
// fails the requests in it, as a broken connection would; the next
// request opens a new one. A side that sends nothing for a while pings,
// and a tunnel that has been silent too long is closed.
package tunnel
