package simdevice

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// prober is a device's kubelet.Config.Dial: the kubelet's httpGet,
// tcpSocket and grpc probes and hooks reach a fake server in memory,
// never the network. A TCP connection to a pod of the device (or to
// HostIP, for hostNetwork pods) is accepted; an HTTP request there, in
// clear or over TLS, is answered 200 "ok"; a gRPC health check, SERVING.
// Any other address refuses the connection.
type prober struct {
	network *simNetwork
}

func (p *prober) dial(_ context.Context, network, addr string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, &net.OpError{Op: "dial", Net: network, Err: err}
	}
	ip := net.ParseIP(host)
	n, _ := strconv.Atoi(port)
	if !strings.HasPrefix(network, "tcp") || ip == nil || !(ip.Equal(net.ParseIP(HostIP)) || p.network.attached(ip)) {
		return nil, &net.OpError{Op: "dial", Net: network, Addr: &net.TCPAddr{IP: ip, Port: n},
			Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	}
	client, server := net.Pipe()
	go serveProbe(server)
	return client, nil
}

// serveProbe answers one connection: TLS is unwrapped, an HTTP/2
// preface goes to the gRPC health server, anything else is read as
// HTTP/1 requests. A tcpSocket probe just closes it.
func serveProbe(c net.Conn) {
	br := bufio.NewReader(c)
	conn := &peekedConn{Conn: c, r: br}
	head, err := br.Peek(1)
	if err != nil {
		c.Close()
		return
	}
	if head[0] == 0x16 { // a TLS handshake record
		serveProbe(tls.Server(conn, probeTLS()))
		return
	}
	const preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
	if b, err := br.Peek(len(preface)); err == nil && string(b) == preface {
		grpcProbes().conns <- conn
		return
	}
	defer c.Close()
	for {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		_, _ = io.Copy(io.Discard, req.Body)
		req.Body.Close()
		if _, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nok"); err != nil || req.Close {
			return
		}
	}
}

// peekedConn reads what was peeked first.
type peekedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *peekedConn) Read(b []byte) (int, error) { return c.r.Read(b) }

var (
	probeTLSOnce sync.Once
	probeTLSCfg  *tls.Config
)

// probeTLS is a self-signed certificate, as probes skip verification.
func probeTLS() *tls.Config {
	probeTLSOnce.Do(func() {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			panic(err)
		}
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "simdevice pod"},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(10 * 365 * 24 * time.Hour),
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
		if err != nil {
			panic(err)
		}
		probeTLSCfg = &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}}
	})
	return probeTLSCfg
}

var (
	grpcOnce sync.Once
	grpcLn   *connListener
)

// grpcProbes is the process's gRPC health server, for every device.
func grpcProbes() *connListener {
	grpcOnce.Do(func() {
		grpcLn = &connListener{conns: make(chan net.Conn)}
		s := grpc.NewServer()
		healthpb.RegisterHealthServer(s, servingHealth{})
		go func() { _ = s.Serve(grpcLn) }()
	})
	return grpcLn
}

// servingHealth says every service is serving.
type servingHealth struct {
	healthpb.UnimplementedHealthServer
}

func (servingHealth) Check(context.Context, *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
}

// connListener hands the connections sent on conns to a server.
type connListener struct {
	conns chan net.Conn
}

func (l *connListener) Accept() (net.Conn, error) { return <-l.conns, nil }
func (l *connListener) Close() error              { return nil }
func (l *connListener) Addr() net.Addr            { return &net.TCPAddr{IP: net.ParseIP(HostIP)} }
