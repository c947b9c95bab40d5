// Package server is the agent's HTTPS server (agentapi.AgentPort, :10250):
// /healthz, and /containerLogs/<namespace>/<pod>/<container> with the
// kubelet's query parameters (follow, tailLines, previous, timestamps,
// limitBytes, sinceSeconds, sinceTime), read from the CRI-format files
// agent/runtime writes through its logger (package logdriver) — so logs
// are served from the files alone, whether or not containerd or the
// container is up.
//
// With a Config.Streamer it also serves the kubelet's streaming paths,
// which the hub proxies for kubectl exec, attach and port-forward (GET or
// POST, as kube-apiserver passes on the client's method):
//
//   - /exec/<ns>/<pod>/<container>?command=…&input=1&output=1&error=1&tty=1
//     (kube-apiserver's names for the kubelet; PodExecOptions' stdin,
//     stdout and stderr are taken too) runs the command in the running
//     container through Streamer.Exec (containerd's task exec, with a
//     terminal and its resizes when tty is set).
//   - /attach/<ns>/<pod>/<container>?input=1&output=1&error=1&tty=1 joins
//     the container's main process. One started with stdin or a terminal
//     (its spec's stdin, stdinOnce, tty; Streamer.AttachMode) is attached
//     to through Streamer.Attach: its output, its stdin with input=1, its
//     terminal's resizes. Any other container has no stdin (its stdout
//     and stderr go to the log driver), so attach streams its log from
//     then on, stdout and stderr together, and input=1 is refused (400,
//     "does not have stdin enabled", before the upgrade).
//   - /portForward/<ns>/<pod> forwards each connection the client opens
//     to the port on the pod's loopback, dialled inside the pod's network
//     namespace (Streamer.DialPod) — no socat or nsenter.
//
// # Streaming protocols
//
// exec and attach speak the remote command protocol over WebSocket
// (v5.channel.k8s.io, which client-go and kubectl 1.30+ ask for first and
// which can close stdin; v4.channel.k8s.io and the unversioned
// channel.k8s.io and base64 variants) or SPDY (v4, v3 and v2; v1 is not
// served). The framing is k8s.io/apimachinery's (httpstream/wsstream,
// httpstream/spdy); this package maps the streams (stdin, stdout, stderr,
// error, resize) and reports the outcome on the error stream: with v4 and
// v5 a Status, Success or NonZeroExitCode with the exit code as its
// ExitCode cause (kubectl: "command terminated with exit code N"), with
// older versions the error's text. port-forward speaks portforward.k8s.io
// over SPDY, or the same SPDY session tunneled through a WebSocket (the
// SPDY/3.1+portforward.k8s.io subprotocol kubectl 1.30+ tries first,
// falling back to SPDY); a port that cannot be dialled is reported on the
// connection's error stream ("error forwarding port N to pod ns/name:
// ..."). Sessions take over the connection (HTTP/1.1 upgrades, so the hub
// uses HTTP/1.1 for them), have no write deadline, and end after
// StreamIdleTimeout without traffic.
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
