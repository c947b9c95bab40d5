// Package etcdtest runs a real etcd (one member or a cluster) (go.etcd.io/etcd/server/v3/embed) in
// a test's process, on free loopback ports and in the test's temp dir, for
// the store's contract suite and multi-hub tests.
package etcdtest

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"flotilla.dev/flotilla/internal/testenv"
)

// Start runs a one-member etcd keeping its data in dir until the test
// ends (or Stop), and returns it.
func Start(t testing.TB, dir string) *Etcd {
	t.Helper()
	return StartCluster(t, dir, 1)[0]
}

// StartCluster runs an etcd cluster of n members, each keeping its data
// under dir, until the test ends; any member can be stopped to play its
// loss. A test that starts an etcd is an integration test: skipped with
// -short (testenv).
func StartCluster(t testing.TB, dir string, n int) []*Etcd {
	t.Helper()
	testenv.Integration(t, "starts an embedded etcd")
	members, err := Run(dir, n)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range members {
		t.Cleanup(m.Stop)
	}
	return members
}

// Run is StartCluster for programs that are not tests (make bench): the
// caller stops the members.
func Run(dir string, n int) ([]*Etcd, error) {
	port := func() (url.URL, error) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return url.URL{}, err
		}
		defer ln.Close()
		return url.URL{Scheme: "http", Host: ln.Addr().String()}, nil
	}
	cfgs := make([]*embed.Config, n)
	var initial []string
	for i := range cfgs {
		cfg := embed.NewConfig()
		cfg.Name = fmt.Sprintf("member-%d", i)
		cfg.Dir = filepath.Join(dir, cfg.Name)
		// Its shutdown logs errors about closed listeners; nothing to see.
		cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
		client, err := port()
		if err != nil {
			return nil, err
		}
		peer, err := port()
		if err != nil {
			return nil, err
		}
		cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
		cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
		initial = append(initial, fmt.Sprintf("%s=%s", cfg.Name, peer.String()))
		cfgs[i] = cfg
	}
	out := make([]*Etcd, 0, n)
	stopAll := func() {
		for _, m := range out {
			m.Stop()
		}
	}
	for _, cfg := range cfgs {
		cfg.InitialCluster = strings.Join(initial, ",")
		e, err := embed.StartEtcd(cfg)
		if err != nil {
			stopAll()
			return nil, fmt.Errorf("embedded etcd %s: %w", cfg.Name, err)
		}
		out = append(out, &Etcd{e: e, URL: cfg.ListenClientUrls[0].String()})
	}
	for _, m := range out {
		select {
		case <-m.e.Server.ReadyNotify():
		case <-time.After(60 * time.Second):
			stopAll()
			return nil, errors.New("embedded etcd not ready within 60s")
		}
	}
	return out, nil
}

// URLs lists the client URLs of members.
func URLs(members []*Etcd) []string {
	var out []string
	for _, m := range members {
		out = append(out, m.URL)
	}
	return out
}

// Etcd is a running embedded etcd.
type Etcd struct {
	e *embed.Etcd
	// URL is its client URL.
	URL string
}

// IsLeader says whether it leads the cluster now.
func (e *Etcd) IsLeader() bool {
	return e.e != nil && e.e.Server.Leader() == e.e.Server.MemberID()
}

// Stop stops it (idempotent).
func (e *Etcd) Stop() {
	if e.e != nil {
		e.e.Close()
		e.e = nil
	}
}
