package hubapi

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"flotilla.dev/flotilla/bench/procstat"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// CreateResult is the outcome of a create run.
type CreateResult struct {
	Clients  int
	Creates  int
	PerSec   float64
	P50, P99 time.Duration
}

// Creates creates n ConfigMaps in namespace ns from clients concurrent
// clients, each with its own connection.
func Creates(ctx context.Context, cfg *rest.Config, ns string, clients, n int) (CreateResult, error) {
	cs := make([]kubernetes.Interface, clients)
	for i := range cs {
		c := rest.CopyConfig(cfg)
		c.QPS, c.Burst = -1, 0
		// A distinct transport per client: one connection each, as
		// separate devices or controllers would have.
		hc, err := rest.HTTPClientFor(c)
		if err != nil {
			return CreateResult{}, err
		}
		hc.Transport = freshTransport(hc.Transport)
		k, err := kubernetes.NewForConfigAndClient(c, hc)
		if err != nil {
			return CreateResult{}, err
		}
		cs[i] = k
	}
	lat := make([]time.Duration, n)
	var next int64
	var mu sync.Mutex
	var firstErr error
	var wg sync.WaitGroup
	start := time.Now()
	for w := 0; w < clients; w++ {
		wg.Add(1)
		go func(k kubernetes.Interface, w int) {
			defer wg.Done()
			for {
				mu.Lock()
				i := next
				next++
				mu.Unlock()
				if int(i) >= n || ctx.Err() != nil {
					return
				}
				t0 := time.Now()
				_, err := k.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{
					ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("c%d-%d", clients, i)},
					Data:       map[string]string{"shop": "0042", "payload": strings.Repeat("x", 256)},
				}, metav1.CreateOptions{})
				lat[i] = time.Since(t0)
				if err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					return
				}
			}
		}(cs[w], w)
	}
	wg.Wait()
	elapsed := time.Since(start)
	if firstErr != nil {
		return CreateResult{}, firstErr
	}
	p50, p99 := percentiles(lat)
	return CreateResult{Clients: clients, Creates: n, PerSec: float64(n) / elapsed.Seconds(), P50: p50, P99: p99}, nil
}

func freshTransport(rt http.RoundTripper) http.RoundTripper {
	if t, ok := rt.(*http.Transport); ok {
		return t.Clone()
	}
	return rt
}

func percentiles(d []time.Duration) (p50, p99 time.Duration) {
	if len(d) == 0 {
		return 0, 0
	}
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)*50/100], s[min(len(s)-1, len(s)*99/100)]
}

// FanoutResult is the outcome of a watch fan-out run.
type FanoutResult struct {
	Watchers int
	// P50 and P99 of the time from the write's start to each
	// watcher having the event; All is when the last watcher had it.
	P50, P99, All time.Duration
	// HubRSS is the hub's resident memory with every watcher connected.
	HubRSS int64
}

// Fanout opens watchers watches of ConfigMaps in ns, each on its own
// HTTP/1.1 connection (as separate devices would), writes one ConfigMap
// and measures when each watcher sees it. hubPID, when not 0, is read for
// the hub's RSS.
func Fanout(ctx context.Context, cfg *rest.Config, ns string, watchers, hubPID int) (FanoutResult, error) {
	tlsCfg, err := rest.TLSConfigFor(cfg)
	if err != nil {
		return FanoutResult{}, err
	}
	tlsCfg.NextProtos = []string{"http/1.1"}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return FanoutResult{}, err
	}
	cm, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: "fanout-"}}, metav1.CreateOptions{})
	if err != nil {
		return FanoutResult{}, err
	}
	url := fmt.Sprintf("%s/api/v1/namespaces/%s/configmaps?watch=true&resourceVersion=%s&fieldSelector=metadata.name%%3D%s",
		strings.TrimSuffix(cfg.Host, "/"), ns, cm.ResourceVersion, cm.Name)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	got := make([]time.Time, watchers)
	var connected, done sync.WaitGroup
	errs := make(chan error, watchers)
	for i := 0; i < watchers; i++ {
		connected.Add(1)
		done.Add(1)
		go func(i int) {
			defer done.Done()
			tr := &http.Transport{TLSClientConfig: tlsCfg.Clone(), DisableCompression: true, ForceAttemptHTTP2: false, TLSNextProto: map[string]func(string, *tls.Conn) http.RoundTripper{}}
			defer tr.CloseIdleConnections()
			req, _ := http.NewRequestWithContext(wctx, http.MethodGet, url, nil)
			var resp *http.Response
			var err error
			for attempt := 0; attempt < 20; attempt++ {
				if resp, err = tr.RoundTrip(req); err == nil {
					break
				}
				time.Sleep(time.Duration(attempt*50) * time.Millisecond)
			}
			connected.Done()
			if err != nil {
				errs <- err
				return
			}
			defer resp.Body.Close()
			r := bufio.NewReaderSize(resp.Body, 4096)
			for {
				line, err := r.ReadBytes('\n')
				if err != nil {
					return
				}
				// The hub writes the type first; a prefix check keeps the
				// watchers' own CPU (on the same machine) out of the figure.
				if bytes.HasPrefix(line, []byte(`{"type":"MODIFIED"`)) {
					got[i] = time.Now()
					return
				}
			}
		}(i)
	}
	connected.Wait()
	select {
	case err := <-errs:
		return FanoutResult{}, fmt.Errorf("opening watches: %w", err)
	default:
	}
	time.Sleep(time.Second) // let every response header arrive
	rss := procstat.RSS(hubPID)
	cm.Data = map[string]string{"v": "1"}
	written := time.Now()
	if _, err := cs.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		return FanoutResult{}, err
	}
	finished := make(chan struct{})
	go func() { done.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-time.After(60 * time.Second):
		cancel()
		<-finished
	}
	var lat []time.Duration
	var last time.Duration
	missing := 0
	for _, g := range got {
		if g.IsZero() {
			missing++
			continue
		}
		d := max(g.Sub(written), 0)
		lat = append(lat, d)
		last = max(last, d)
	}
	if missing > 0 {
		return FanoutResult{}, fmt.Errorf("%d of %d watchers did not get the event within 60s", missing, watchers)
	}
	p50, p99 := percentiles(lat)
	return FanoutResult{Watchers: watchers, P50: p50, P99: p99, All: last, HubRSS: rss}, nil
}
