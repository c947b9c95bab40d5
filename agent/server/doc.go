// Package server is the agent's HTTPS server (agentapi.AgentPort, :10250):
// /healthz, and /containerLogs/<namespace>/<pod>/<container> with the
// kubelet's query parameters (follow, tailLines, previous, timestamps,
// limitBytes, sinceSeconds, sinceTime), read from the CRI-format files
// agent/runtime writes through its logger (package logdriver) — so logs
// are served from the files alone, whether or not containerd or the
// container is up.
//
// # Who may call
//
// Only the hub. The server asks for a client certificate and checks it on
// every request: it must chain to the hub's CA (Config.ClientCAs) with the
// client-auth usage (else 401), and pass Config.Authorize (else 403),
// which by default lets through the hub's admin identity (group
// system:masters). The security work narrows this to the hub's own
// identity by passing another Authorizer. /healthz answers anybody: it
// says nothing but "ok".
//
// # Serving certificate
//
// The agent serves a self-signed certificate (LoadOrCreateServingCert,
// kept in the agent's data dir) and publishes its SHA-256 in the Node's
// AnnotationServingCertHash; the hub pins that hash instead of verifying a
// chain, so neither a CA for agents nor correct addresses in the
// certificate are needed, and a device cannot be impersonated by anyone
// who cannot write its Node. The agent's client certificate cannot stand
// in: it is issued for client authentication only.
//
// # Reading logs
//
// A container attempt's log is <attempt>.log with rotated predecessors
// <attempt>.log.1 (newest) … .N; the newest attempt is the current
// container, the one before it "previous". tailLines counts whole lines
// (a long line split into partial entries counts once) across the rotated
// files. A follow polls the file (DefaultPoll): new lines are sent as they
// come, a rotation is seen as a new file at the path (the old one is
// finished first), and the follow ends when the client leaves, the byte
// limit is reached, a newer attempt starts, or ContainerRunning says the
// container has stopped.
package server
