package fleetsim

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"path/filepath"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"flotilla.dev/flotilla/agent/hubclient"
	"flotilla.dev/flotilla/agent/join"
	"flotilla.dev/flotilla/api"
	"flotilla.dev/flotilla/api/agentapi"
	hubjoin "flotilla.dev/flotilla/hub/join"
)

// Options describe a simulated fleet.
type Options struct {
	// Admin is an admin client config of the hub; its Host is the URL the
	// devices join and talk to, its CA the one they pin.
	Admin *rest.Config
	// Devices is how many there are, named Prefix-00000 on.
	Devices int
	Prefix  string
	// Sites spreads the devices round-robin over sites site-0 … (their
	// zone label, given by their site's join token); 0 gives none a site.
	Sites int
	// DataDir holds each device's identity (DataDir/<name>/pki).
	DataDir string
	// LeaseInterval is how often each device renews its Lease (10 s).
	LeaseInterval time.Duration
	// Parallel joins at most this many devices at once (64).
	Parallel int
	Log      *slog.Logger
}

// Fleet is a running simulated fleet.
type Fleet struct {
	devices []*Device
	cancel  context.CancelFunc
	done    sync.WaitGroup
}

// Start joins the devices, reports their Nodes Ready and runs them until
// Stop. It returns once every device has joined and has its pod CIDR;
// their watches open right after (WaitWatching).
func Start(ctx context.Context, o Options) (*Fleet, error) {
	if o.Admin == nil || o.Devices <= 0 || o.DataDir == "" {
		return nil, errors.New("fleetsim: Admin, Devices and DataDir are required")
	}
	if o.Prefix == "" {
		o.Prefix = "sim"
	}
	if o.LeaseInterval <= 0 {
		o.LeaseInterval = 10 * time.Second
	}
	if o.Parallel <= 0 {
		o.Parallel = 64
	}
	if o.Log == nil {
		o.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	admin, err := kubernetes.NewForConfig(o.Admin)
	if err != nil {
		return nil, err
	}
	caHash, err := caHashOf(o.Admin)
	if err != nil {
		return nil, err
	}
	sites := max(o.Sites, 1)
	tokens := make([]string, sites)
	for i := range tokens {
		opts := hubjoin.TokenOptions{TTL: time.Hour, Description: "fleetsim"}
		if o.Sites > 0 {
			opts.Labels = map[string]string{api.LabelZone: fmt.Sprintf("site-%d", i)}
		}
		if tokens[i], err = createToken(ctx, admin, opts); err != nil {
			return nil, err
		}
	}

	hubURL, err := url.Parse(o.Admin.Host)
	if err != nil {
		return nil, fmt.Errorf("fleetsim: the hub's URL %q: %w", o.Admin.Host, err)
	}
	hubIP, _ := netip.ParseAddr(hubURL.Hostname())
	loopback := hubIP.Is4() && hubIP.IsLoopback()

	runCtx, cancel := context.WithCancel(context.Background())
	f := &Fleet{cancel: cancel, devices: make([]*Device, o.Devices)}
	sem := make(chan struct{}, o.Parallel)
	errs := make(chan error, o.Devices)
	var joined sync.WaitGroup
	for i := range o.Devices {
		d := &Device{name: fmt.Sprintf("%s-%05d", o.Prefix, i), leaseEvery: o.LeaseInterval,
			hostIP: fmt.Sprintf("100.%d.%d.%d", 64+i>>16, (i>>8)&0xff, i&0xff), log: o.Log,
			firstSaw: map[types.UID]time.Time{}, reported: map[types.UID]bool{}, slices: map[string]string{}, services: map[string]bool{}}
		if o.Sites > 0 {
			d.site = fmt.Sprintf("site-%d", i%sites)
		}
		if loopback {
			d.localAddr = loopbackAddr(i)
		}
		f.devices[i] = d
		joined.Add(1)
		go func(tok string) {
			defer joined.Done()
			sem <- struct{}{}
			err := d.join(ctx, o, tok, caHash)
			<-sem
			if err != nil {
				errs <- err
				return
			}
			f.done.Add(1)
			go func() { defer f.done.Done(); d.run(runCtx) }()
		}(tokens[i%sites])
	}
	joined.Wait()
	close(errs)
	var all []error
	for err := range errs {
		all = append(all, err)
	}
	if len(all) > 0 {
		f.Stop()
		return nil, fmt.Errorf("fleetsim: %d of %d devices did not join: %w", len(all), o.Devices, errors.Join(all[:min(len(all), 3)]...))
	}
	return f, nil
}

// join gets the device its identity and client, and registers its Node.
// A join the hub refuses is an error at once; one it does not answer in
// time, or answers 429 or 5xx (a hub busy with thousands of joins), is
// tried again after a jittered pause, as an agent's service restarts it.
func (d *Device) join(ctx context.Context, o Options, token, caHash string) error {
	var id *join.Identity
	var err error
	for attempt := 0; ; attempt++ {
		id, err = join.Join(ctx, join.Config{Hub: o.Admin.Host, Token: token, CAHash: caHash, NodeName: d.name,
			DataDir: filepath.Join(o.DataDir, d.name), Log: o.Log})
		var refused *join.RefusedError
		final := errors.As(err, &refused) && refused.Code != 429 && refused.Code < 500
		if err == nil || final || attempt == 4 {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Duration(1+rand.IntN(5<<attempt)) * time.Second):
		}
	}
	if err != nil {
		return fmt.Errorf("device %s: %w", d.name, err)
	}
	cfg := id.RESTConfig(o.Admin.Host)
	if d.localAddr.IsValid() {
		t, ok := cfg.Transport.(*http.Transport)
		if !ok {
			return fmt.Errorf("device %s: the identity's transport is a %T, not an *http.Transport to dial from %s", d.name, cfg.Transport, d.localAddr)
		}
		dialer := &net.Dialer{LocalAddr: net.TCPAddrFromAddrPort(netip.AddrPortFrom(d.localAddr, 0)), Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
		t.DialContext = dialer.DialContext
	}
	cfg.QPS, cfg.Burst = 20, 40
	// The agent's own client: its kinds only, in protobuf, its watches
	// on one stream.
	if d.client, err = hubclient.NewForConfig(cfg); err != nil {
		return err
	}
	return d.register(ctx)
}

// loopbackAddr is the address on 127.0.0.0/8 the i-th device connects
// from to a hub on loopback. A device of a real fleet has an address of
// its own; 10,000 connections from one address to one port make the
// kernel search the ephemeral ports for a free one on every connect, and
// the simulator's reconnections after a hub restart spent a third of
// their CPU in connect(2) doing so.
func loopbackAddr(i int) netip.Addr {
	return netip.AddrFrom4([4]byte{127, byte(16 + i/(250*250)), byte(1 + i/250%250), byte(1 + i%250)})
}

// Devices are the fleet's devices.
func (f *Fleet) Devices() []*Device { return f.devices }

// WaitWatching waits until every device has all its watches open.
func (f *Fleet) WaitWatching(ctx context.Context) error {
	for {
		open := 0
		for _, d := range f.devices {
			if d.Watching() == Watches {
				open++
			}
		}
		if open == len(f.devices) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d of %d devices have all their watches open: %w", open, len(f.devices), ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Stop ends every device and waits for them.
func (f *Fleet) Stop() {
	f.cancel()
	f.done.Wait()
}

func caHashOf(cfg *rest.Config) (string, error) {
	caPEM := cfg.CAData
	if len(caPEM) == 0 {
		return "", errors.New("fleetsim: the admin config carries no CA data")
	}
	b, _ := pem.Decode(caPEM)
	if b == nil {
		return "", errors.New("fleetsim: the admin config's CA is not PEM")
	}
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		return "", fmt.Errorf("fleetsim: the admin config's CA: %w", err)
	}
	return agentapi.HashCA(c), nil
}

// createToken stores a join token as `flotilla-hub token create` does.
func createToken(ctx context.Context, admin kubernetes.Interface, o hubjoin.TokenOptions) (string, error) {
	tok, err := hubjoin.NewToken()
	if err != nil {
		return "", err
	}
	sec, err := hubjoin.NewTokenSecret(tok, o, time.Now())
	if err != nil {
		return "", err
	}
	if _, err := admin.CoreV1().Secrets(hubjoin.Namespace).Create(ctx, sec, metav1.CreateOptions{}); err != nil {
		return "", fmt.Errorf("fleetsim: creating a join token: %w", err)
	}
	return tok.String(), nil
}
