// Package join owns how identities enter the fleet: join tokens (stored
// hashed, as Secrets of type bootstrap.kubernetes.io/token in
// flotilla-system, with a lifetime, a number of uses and labels for the
// Node), the device join endpoint that turns a token and a CSR into a
// client certificate for system:node:NAME, certificate renewal for joined
// devices, and client certificates that admins issue to people.
//
// Paths (mounted in the API server; the device paths and their bodies are
// api/agentapi's, the hub↔agent contract):
//
//	GET  /join/v1/ca     public: the hub CA (devices pin it by hash)
//	POST /join/v1/csr    public, rate-limited: {token, nodeName, csr}
//	POST /join/v1/renew  devices, with their current certificate: {csr}
//	POST /join/v1/user   admins: {user, role, csr, ttl}
//
// The endpoint works through the hub's own API as the hub's admin, so a
// join leaves the same objects (the token's use count, the Node with its
// key fingerprint and labels) that any client could see.
package join
