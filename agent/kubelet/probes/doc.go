// Package probes runs containers' startup, liveness and readiness probes
// and executes lifecycle hooks.
//
// Runner executes one handler: exec (through the runtime), httpGet (2xx
// and 3xx succeed; redirects are followed to the same host only),
// tcpSocket, and grpc (the standard health service), with the probe's
// timeout. Connections go through a DialFunc so that the kubelet can dial
// pod IPs from the device's network namespace.
//
// Manager runs one goroutine per probe of each running container, keyed
// by pod UID, container name and kind, and remembers the container ID a
// result belongs to, so a restarted container starts from the initial
// results again: not ready, alive, not started. Every timing field is
// honoured: initialDelaySeconds, periodSeconds, timeoutSeconds,
// successThreshold and failureThreshold; liveness and readiness wait for
// the startup probe to succeed, and a startup probe stops once it has.
// A published change calls OnChange with the pod UID; the kubelet then
// recomputes the status (readiness) or restarts the container (liveness
// or startup failure).
package probes
