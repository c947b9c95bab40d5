// Package pki owns the hub's certificate authority and everything signed
// with it: the CA itself, the hub's serving certificate (renewed while the
// hub runs), the admin client certificate, client certificates issued to
// people and devices (from CSRs, so a device's key never leaves it), the
// verification of client certificates presented to the API, and kubeconfig
// files that carry all of it. What devices share with the hub (the CA hash
// they pin when they join, the CSRs they make, their identity's names) is
// api/agentapi's; the hub uses it from there.
//
// # Files
//
// LoadOrCreate keeps its state in one directory (DIR/pki, mode 0700): ca.crt,
// ca.key, serving.crt, serving.key, admin.crt, admin.key, all PEM, keys mode
// 0600, and session-tickets.key (0600), the keys TLS session tickets are
// sealed with, so that clients resume their sessions across hub restarts
// (see tickets.go). ca.crt is written last when the CA is created, so its presence is
// what "the CA exists" means: a CA is never recreated once ca.crt is there,
// because every joined device trusts it. Every file is replaced atomically
// (temporary file, fsync, rename), so a crash leaves either the old or the
// new file; a serving or admin pair that does not match after a crash
// between its two renames is detected at the next start and reissued.
//
// # How client certificates are checked (and why a bad one gets 401)
//
// ServerTLSConfig asks for a client certificate with tls.RequestClientCert
// and does not verify it during the handshake. Had we used
// tls.VerifyClientCertIfGiven, Go's TLS stack would abort the handshake with
// a "bad certificate" alert for a certificate from another CA or an expired
// one: the client would see a connection error, never an HTTP response, and
// the refusal could be neither explained to the user (a metav1.Status) nor
// recorded in the audit log with the request it belonged to. Instead the
// apiserver's authenticator calls VerifyClient (or Authenticate) with
// r.TLS.PeerCertificates on every request. That gives:
//
//   - no certificate: the request reaches the handler unauthenticated, so
//     /healthz, /readyz and the join endpoints work; everything else is a
//     401 decided by the authenticator (VerifyClient returns ErrNoClientCert);
//   - a certificate from another CA, with a broken chain or without the
//     client-auth usage: 401 (ErrUntrustedCert);
//   - an expired or not yet valid certificate: 401 (ErrExpiredCert). The
//     check runs per request against the current time, so a long-lived
//     HTTP/2 connection or watch does not outlive its certificate.
//
// The server does not advertise the hub CA as an acceptable issuer (no
// ClientCAs), so clients send the certificate they have and a foreign one is
// refused with a 401 that says why, instead of being silently withheld.
//
// # Identities
//
// A client certificate's subject carries the identity the way Kubernetes
// reads it: CommonName is the user, Organization the groups
// (IdentityFromCert). The admin certificate is "flotilla:admin" in
// "system:masters"; devices are "system:node:NAME" in "system:nodes".
package pki
