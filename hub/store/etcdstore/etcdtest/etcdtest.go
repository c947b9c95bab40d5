// Package etcdtest runs a real etcd (go.etcd.io/etcd/server/v3/embed) in
// a test's process, on free loopback ports and in the test's temp dir, for
// the store's contract suite and multi-hub tests.
package etcdtest

import (
	"fmt"
	"net"
	"net/url"
	"testing"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// Start runs a one-member etcd keeping its data in dir until the test
// ends (or Stop), and returns it.
func Start(t testing.TB, dir string) *Etcd {
	t.Helper()
	cfg := embed.NewConfig()
	cfg.Dir = dir
	// Its shutdown logs errors about closed listeners; nothing to see.
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	port := func() url.URL {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		return url.URL{Scheme: "http", Host: ln.Addr().String()}
	}
	client, peer := port(), port()
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
	cfg.InitialCluster = fmt.Sprintf("%s=%s", cfg.Name, peer.String())
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		t.Fatalf("embedded etcd: %v", err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(30 * time.Second):
		e.Close()
		t.Fatal("embedded etcd not ready within 30s")
	}
	et := &Etcd{e: e, URL: client.String()}
	t.Cleanup(et.Stop)
	return et
}

// Etcd is a running embedded etcd.
type Etcd struct {
	e *embed.Etcd
	// URL is its client URL.
	URL string
}

// Stop stops it (idempotent).
func (e *Etcd) Stop() {
	if e.e != nil {
		e.e.Close()
		e.e = nil
	}
}
