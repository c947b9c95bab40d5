package pki

import "crypto/tls"

// ServerTLSConfig returns the hub API's TLS configuration: TLS 1.3 only,
// the current serving certificate (so a renewal by Run takes effect on the
// next handshake without a restart), and client certificates requested but
// verified per request by VerifyClient (see the package documentation for
// why). It offers h2 and http/1.1, and issues session tickets sealed with
// the keys in TicketKeysFile, so that clients resume across hub restarts.
//
// Use it with http.Server.ServeTLS(l, "", "") or tls.NewListener; not with
// httptest.Server.StartTLS, which adds its own certificate to Certificates
// and, for clients that send no SNI (connections to an IP address), Go's
// TLS stack then prefers that one over GetCertificate.
func (p *PKI) ServerTLSConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return &p.serving.Load().tls, nil
		},
		ClientAuth:    tls.RequestClientCert,
		NextProtos:    []string{"h2", "http/1.1"},
		WrapSession:   p.wrapSession,
		UnwrapSession: p.unwrapSession,
		VerifyConnection: func(cs tls.ConnectionState) error {
			if cs.DidResume {
				p.resumed.Add(1)
			} else {
				p.full.Add(1)
			}
			return nil
		},
	}
}

// Handshakes counts the TLS handshakes of ServerTLSConfig's connections:
// full ones, and those that resumed a session from a ticket.
func (p *PKI) Handshakes() (full, resumed uint64) { return p.full.Load(), p.resumed.Load() }
