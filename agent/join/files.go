package join

import (
	"crypto/x509"
	"errors"
)

func poolOf(caPEM []byte) (*x509.CertPool, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, errors.New("the hub CA is not a PEM certificate")
	}
	return pool, nil
}
