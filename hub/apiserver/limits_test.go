package apiserver_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"flotilla.dev/flotilla/api"
	"flotilla.dev/flotilla/api/agentapi"
	"flotilla.dev/flotilla/hub/apiserver"
	"flotilla.dev/flotilla/hub/hubtest"
)

// dialer opens TLS connections to a hub, as a stranger (no certificate)
// or as device node.
type dialer struct {
	host string
	tls  *tls.Config
}

func strangerDialer(t *testing.T, h *hubtest.Hub) *dialer {
	t.Helper()
	tc, err := rest.TLSConfigFor(h.Config)
	if err != nil {
		t.Fatal(err)
	}
	return &dialer{host: strings.TrimPrefix(h.Config.Host, "https://"),
		tls: &tls.Config{RootCAs: tc.RootCAs, MinVersion: tls.VersionTLS12, NextProtos: []string{"http/1.1"}}}
}

func deviceDialer(t *testing.T, h *hubtest.Hub, node string) *dialer {
	t.Helper()
	d := strangerDialer(t, h)
	certPEM, keyPEM, err := h.PKI().IssueClientCert(agentapi.NodeUser(node), []string{agentapi.NodesGroup}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	d.tls.Certificates = []tls.Certificate{cert}
	return d
}

// slowRequest sends the headers of a request with a body of length bytes
// and the first bytes of that body, never the rest; the connection is
// closed when the test ends. The i-th connection comes from one of
// several loopback addresses, 25 from each, so that the limit on
// unauthenticated requests per address (a burst of 40) does not refuse
// them first, as it would not refuse a botnet.
func (d *dialer) slowRequest(t *testing.T, i int, method, path string, length int) net.Conn {
	src := &net.TCPAddr{IP: net.IPv4(127, 0, byte(1+i/25/250), byte(2+(i/25)%250))}
	c, err := tls.DialWithDialer(&net.Dialer{LocalAddr: src, Timeout: 10 * time.Second}, "tcp", d.host, d.tls)
	if err != nil {
		t.Errorf("connecting: %v", err)
		return nil
	}
	t.Cleanup(func() { c.Close() })
	_, err = fmt.Fprintf(c, "%s %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n{\"metadata\":{", method, path, d.host, length)
	if err != nil {
		t.Errorf("sending: %v", err)
		return nil
	}
	return c
}

// slowRequests opens n slow requests, 32 at a time.
func (d *dialer) slowRequests(t *testing.T, n int, method, path string) {
	t.Helper()
	var wg sync.WaitGroup
	sem := make(chan struct{}, 32)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			d.slowRequest(t, i, method, path, 100000)
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
}

// readStatus reads the answer on c, a Status, and how long it took.
func readStatus(t *testing.T, c net.Conn) (metav1.Status, time.Duration) {
	t.Helper()
	start := time.Now()
	c.SetReadDeadline(time.Now().Add(20 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer after %v: %v", time.Since(start), err)
	}
	defer resp.Body.Close()
	var st metav1.Status
	data, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(data, &st); err != nil || int(st.Code) != resp.StatusCode {
		t.Fatalf("the answer (%d) is not a Status: %s", resp.StatusCode, data)
	}
	return st, time.Since(start)
}

// deviceLease creates device node's Lease and returns a renewal.
func deviceLease(t *testing.T, h *hubtest.Hub, node string) func(ctx context.Context) error {
	t.Helper()
	leases := h.NodeClient(node).CoordinationV1().Leases(api.NamespaceNodeLease)
	holder := node
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	lease, err := leases.Create(c, &coordv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: node},
		Spec: coordv1.LeaseSpec{HolderIdentity: &holder, RenewTime: &metav1.MicroTime{Time: time.Now()}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("the device's Lease: %v", err)
	}
	return func(ctx context.Context) error {
		lease.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
		l, err := leases.Update(ctx, lease, metav1.UpdateOptions{})
		if err == nil {
			lease = l
		}
		return err
	}
}

// renewsAtOnce checks that a device's Lease renewal succeeds within 2 s.
func renewsAtOnce(t *testing.T, renew func(context.Context) error, while string) {
	t.Helper()
	start := time.Now()
	c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := renew(c); err != nil {
		t.Fatalf("a device's Lease renewal %s failed after %v: %v", while, time.Since(start).Round(time.Millisecond), err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("a device's Lease renewal %s took %v", while, d)
	}
}

// A stranger who opens many connections to the join endpoint and never
// finishes sending their bodies must not stop the fleet's writes: a
// device still renews its Lease at once (with the default limits: more
// slow bodies than the 400 mutating requests in flight).
func TestSlowPublicBodiesDoNotStopDeviceWrites(t *testing.T) {
	h := hubtest.Start(t)
	renew := deviceLease(t, h, "dev-1")
	strangerDialer(t, h).slowRequests(t, 450, http.MethodPost, agentapi.PathCSR)
	time.Sleep(500 * time.Millisecond) // the hub reads their headers
	renewsAtOnce(t, renew, "with 450 slow join bodies open")
}

// A device (stolen, say) that sends its bodies slowly holds no slot in
// flight either: they are read before the request takes one.
func TestSlowDeviceBodiesHoldNoSlots(t *testing.T) {
	h := hubtest.Start(t, hubtest.Options{Limits: apiserver.Limits{MaxMutatingInFlight: 5}})
	renew := deviceLease(t, h, "dev-1")
	deviceDialer(t, h, "dev-2").slowRequests(t, 20, http.MethodPut, "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/dev-2")
	time.Sleep(300 * time.Millisecond)
	renewsAtOnce(t, renew, "with 20 slow bodies of another device open")
}

// Bodies must arrive within their deadline, or the request is answered
// 408 and its connection closed; requests without a certificate have
// their own, small pool.
func TestBodyDeadlinesAndThePublicPool(t *testing.T) {
	h := hubtest.Start(t, hubtest.Options{Limits: apiserver.Limits{
		PublicBodyTimeout: 300 * time.Millisecond, BodyTimeout: 600 * time.Millisecond, MaxPublicInFlight: 2}})
	renew := deviceLease(t, h, "dev-1")

	stranger := strangerDialer(t, h)
	c := stranger.slowRequest(t, 0, http.MethodPost, agentapi.PathCSR, 1000)
	st, took := readStatus(t, c)
	if st.Code != http.StatusRequestTimeout || st.Reason != metav1.StatusReasonTimeout || !strings.Contains(st.Message, "not received within 300ms") {
		t.Errorf("a slow join body: %d %s %q, want 408 Timeout", st.Code, st.Reason, st.Message)
	}
	if took > 3*time.Second {
		t.Errorf("a slow join body was answered after %v", took)
	}
	dev := deviceDialer(t, h, "dev-1")
	c = dev.slowRequest(t, 0, http.MethodPut, "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/dev-1", 1000)
	st, _ = readStatus(t, c)
	if st.Code != http.StatusRequestTimeout || !strings.Contains(st.Message, "not received within 600ms") {
		t.Errorf("a device's slow body: %d %s %q, want 408 Timeout", st.Code, st.Reason, st.Message)
	}

	// A body over the public limit is refused before it is read.
	code, st3, _ := raw(t, h.Config, http.MethodPost, agentapi.PathCSR, "application/json", make([]byte, 2<<20), false)
	if code != http.StatusRequestEntityTooLarge || !strings.Contains(st3.Message, "without a client certificate") {
		t.Errorf("a 2 MiB join body: %d %q, want 413", code, st3.Message)
	}

	// Two slow joins fill the public pool: the third stranger waits, the
	// device does not.
	stranger.slowRequest(t, 1, http.MethodPost, agentapi.PathCSR, 1000)
	stranger.slowRequest(t, 2, http.MethodPost, agentapi.PathCSR, 1000)
	time.Sleep(100 * time.Millisecond)
	code, st3, _ = raw(t, h.Config, http.MethodPost, agentapi.PathCSR, "application/json", []byte(`{}`), false)
	if code != http.StatusTooManyRequests || !strings.Contains(st3.Message, "without a client certificate") {
		t.Errorf("a join with the public pool full: %d %q, want 429", code, st3.Message)
	}
	renewsAtOnce(t, renew, "with the public pool full")
}

// The memory the bodies of clients other than administrators take at
// once is bounded; every body's share is given back when it ends.
func TestBodyBudget(t *testing.T) {
	h := hubtest.Start(t, hubtest.Options{Limits: apiserver.Limits{MaxBodyBytesInFlight: 200 << 10}})
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	deviceLease(t, h, "dev-1")
	dev := h.NodeClient("dev-1").CoordinationV1()
	leases := dev.Leases(api.NamespaceNodeLease)
	withNote := func(size int) *coordv1.Lease {
		l, err := leases.Get(c, "dev-1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		l.Annotations = map[string]string{"note": strings.Repeat("x", size)}
		return l
	}
	// (client-go would retry a 429 ten times.)
	err := dev.RESTClient().Put().Namespace(api.NamespaceNodeLease).Resource("leases").Name("dev-1").
		Body(withNote(300 << 10)).MaxRetries(0).Do(c).Error()
	if !apierrors.IsTooManyRequests(err) || !strings.Contains(err.Error(), "too many request bodies") {
		t.Fatalf("a 300 KiB body over a 200 KiB budget: %v, want 429", err)
	}
	for i := range 20 {
		if _, err := leases.Update(c, withNote(50<<10+i), metav1.UpdateOptions{}); err != nil {
			t.Fatalf("body %d of 50 KiB, one after the other: %v (was a body's share not given back?)", i, err)
		}
	}
	l, err := h.Client.CoordinationV1().Leases(api.NamespaceNodeLease).Get(c, "dev-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	l.Annotations = map[string]string{"note": strings.Repeat("y", 200<<10)}
	if _, err := h.Client.CoordinationV1().Leases(api.NamespaceNodeLease).Update(c, l, metav1.UpdateOptions{}); err != nil {
		t.Errorf("the admin's 200 KiB body (administrators are not bounded): %v", err)
	}
}

// The deadline on answers spares streams: a watch outlives it, also on
// an HTTP/1.1 connection whose previous answer had one.
func TestResponseDeadlineSparesWatches(t *testing.T) {
	h := hubtest.Start(t, hubtest.Options{Limits: apiserver.Limits{ResponseTimeout: 300 * time.Millisecond}})
	for _, proto := range []string{"h2", "http/1.1"} {
		t.Run(proto, func(t *testing.T) {
			cfg := rest.CopyConfig(h.Config)
			if proto == "http/1.1" {
				cfg.TLSClientConfig.NextProtos = []string{"http/1.1"}
			}
			cs := kubernetes.NewForConfigOrDie(cfg)
			c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cms := cs.CoreV1().ConfigMaps("default")
			list, err := cms.List(c, metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			w, err := cms.Watch(c, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
			if err != nil {
				t.Fatal(err)
			}
			defer w.Stop()
			time.Sleep(time.Second)
			name := "after-" + strings.ReplaceAll(proto, "/", "")
			if _, err := h.Client.CoreV1().ConfigMaps("default").Create(c, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			select {
			case ev, ok := <-w.ResultChan():
				if !ok || ev.Type != watch.Added || ev.Object.(*corev1.ConfigMap).Name != name {
					t.Fatalf("watch after 1 s: %v %v, want the new ConfigMap", ev.Type, ok)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the watch delivered nothing")
			}
		})
	}
}

// Every request gives its slot back: many more requests than slots, one
// after the other, all pass (reads, writes, and joins without a
// certificate).
func TestSlotsAreGivenBack(t *testing.T) {
	h := hubtest.Start(t, hubtest.Options{Limits: apiserver.Limits{MaxReadOnlyInFlight: 2, MaxMutatingInFlight: 2, MaxPublicInFlight: 2, FailureRate: -1}})
	renew := deviceLease(t, h, "dev-1")
	services := h.NodeClient("dev-1").CoreV1().Services("default")
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range 10 {
		if _, err := services.List(c, metav1.ListOptions{}); err != nil {
			t.Fatalf("read %d: %v", i, err)
		}
		if err := renew(c); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
		if code, st, _ := raw(t, h.Config, http.MethodPost, agentapi.PathCSR, "application/json", []byte(`{}`), false); code == http.StatusTooManyRequests {
			t.Fatalf("join %d: %d %s", i, code, st.Message)
		}
	}
}
