// Package join owns a device's identity: joining the fleet with a token
// (fetch the hub CA, refuse it unless it matches the pinned hash, make a
// key on the device, send only a CSR), keeping the key and certificate in
// the agent's data dir, and renewing the certificate online at 70% of its
// lifetime.
//
// # Files (DATA_DIR/pki, mode 0700)
//
//   - ca.crt: the hub CA the device pinned when it joined.
//   - node.pem: the client certificate followed by its private key, mode
//     0600. Both live in one file so that a renewal replaces them in one
//     atomic rename: a crash never pairs a certificate with the wrong key.
//     client-go accepts the file as both certFile and keyFile.
//
// Once these exist the device needs nothing else: Join returns the stored
// identity without talking to the hub, so a device that reboots while the
// hub is down keeps its identity.
package join
