package watchmux_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"flotilla.dev/flotilla/agent/watchmux"
	"flotilla.dev/flotilla/api/agentapi"
	"flotilla.dev/flotilla/hub/hubtest"
)

// wire sees what reaches the hub under the multiplexer.
type wire struct {
	next http.RoundTripper

	mu sync.Mutex
	// opened counts the streams opened, open those open now; watchGETs
	// the watches sent as GETs of their own.
	opened, open, watchGETs int
	// old plays a hub that serves no multiplexed watches.
	old bool
}

func (w *wire) RoundTrip(r *http.Request) (*http.Response, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case r.URL.Path == agentapi.PathWatches && w.old:
		return &http.Response{StatusCode: http.StatusNotFound, Status: "404 Not Found", Header: http.Header{},
			Body: io.NopCloser(strings.NewReader("404 page not found")), Request: r}, nil
	case r.URL.Path == agentapi.PathWatches:
		resp, err := w.next.RoundTrip(r)
		if err == nil {
			w.opened++
			w.open++
			resp.Body = &closer{ReadCloser: resp.Body, w: w}
		}
		return resp, err
	case r.URL.Query().Get("watch") == "true":
		w.watchGETs++
	}
	return w.next.RoundTrip(r)
}

func (w *wire) counts() (opened, open, watchGETs int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.opened, w.open, w.watchGETs
}

type closer struct {
	io.ReadCloser
	w    *wire
	once sync.Once
}

func (c *closer) Close() error {
	c.once.Do(func() { c.w.mu.Lock(); c.w.open--; c.w.mu.Unlock() })
	return c.ReadCloser.Close()
}

// client is a clientset whose watches go through a multiplexer, over w.
func client(t *testing.T, cfg *rest.Config, w *wire) kubernetes.Interface {
	t.Helper()
	cfg = rest.CopyConfig(cfg)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		w.next = rt
		return watchmux.New(w)
	})
	return kubernetes.NewForConfigOrDie(cfg)
}

// next is the watch's next event, or a failure after a while.
func next(t *testing.T, w watch.Interface) watch.Event {
	t.Helper()
	select {
	case ev, ok := <-w.ResultChan():
		if !ok {
			t.Fatal("the watch ended")
		}
		return ev
	case <-time.After(10 * time.Second):
		t.Fatal("no event within 10 s")
	}
	return watch.Event{}
}

// TestADevicesWatchesShareOneStream: an agent's watches, as a device
// (its node authorizer applies to each), on one stream, each getting
// its own events.
func TestADevicesWatchesShareOneStream(t *testing.T) {
	h := hubtest.Start(t)
	ctx := context.Background()
	admin := h.Client
	if _, err := admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "dev1"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	w := &wire{}
	dev := client(t, h.NodeConfig("dev1"), w)

	mine := fields.OneTermEqualSelector("spec.nodeName", "dev1").String()
	self := fields.OneTermEqualSelector("metadata.name", "dev1").String()
	starts := map[string]func() (watch.Interface, error){
		"node": func() (watch.Interface, error) {
			return dev.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{FieldSelector: self})
		},
		"pods": func() (watch.Interface, error) {
			return dev.CoreV1().Pods("").Watch(ctx, metav1.ListOptions{FieldSelector: mine})
		},
		"services": func() (watch.Interface, error) { return dev.CoreV1().Services("").Watch(ctx, metav1.ListOptions{}) },
	}
	watches := map[string]watch.Interface{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for name, start := range starts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			wi, err := start()
			if err != nil {
				t.Errorf("watch of %s: %v", name, err)
				return
			}
			mu.Lock()
			watches[name] = wi
			mu.Unlock()
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	for _, wi := range watches {
		defer wi.Stop()
	}
	// The watches without a revision start with the current state.
	if ev := next(t, watches["node"]); ev.Type != watch.Added || ev.Object.(*corev1.Node).Name != "dev1" {
		t.Fatalf("node watch began with %s %T", ev.Type, ev.Object)
	}

	pod := func(name, node string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
			Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "example.com/app@sha256:" + strings.Repeat("a", 64)}}}}
	}
	if _, err := admin.CoreV1().Pods("default").Create(ctx, pod("elsewhere", "dev2"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.CoreV1().Pods("default").Create(ctx, pod("here", "dev1"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if ev := next(t, watches["pods"]); ev.Type != watch.Added || ev.Object.(*corev1.Pod).Name != "here" {
		t.Errorf("pods watch got %s %v, want ADDED here (and never the other device's pod)", ev.Type, ev.Object)
	}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}}}
	if _, err := admin.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if ev := next(t, watches["services"]); ev.Type != watch.Added || ev.Object.(*corev1.Service).Name != "web" {
		t.Errorf("services watch got %s %v, want ADDED web", ev.Type, ev.Object)
	}
	if _, err := admin.CoreV1().Nodes().Patch(ctx, "dev1", "application/merge-patch+json", []byte(`{"metadata":{"labels":{"a":"b"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if ev := next(t, watches["node"]); ev.Type != watch.Modified || ev.Object.(*corev1.Node).Labels["a"] != "b" {
		t.Errorf("node watch got %s, want MODIFIED with the label", ev.Type)
	}

	opened, open, gets := w.counts()
	if open != 1 || gets != 0 {
		t.Errorf("%d streams open (%d opened) and %d watches sent as GETs; want the three watches on one stream", open, opened, gets)
	}

	// What the device may not watch is refused as its GET would be.
	_, err := dev.CoreV1().Pods("").Watch(ctx, metav1.ListOptions{})
	if !apierrors.IsForbidden(err) {
		t.Errorf("a device's watch of every pod: %v, want forbidden", err)
	}
	_, err = dev.CoreV1().Pods("").Watch(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=dev1,nonsense=1"})
	if !apierrors.IsBadRequest(err) {
		t.Errorf("a watch with a field selector the hub does not serve: %v, want bad request", err)
	}
}

// TestAWatchResumesWhenTheStreamOpensAgain: a watch joining an open
// stream has it opened again; the watches already on it resume from
// their revision, losing and repeating nothing.
func TestAWatchResumesWhenTheStreamOpensAgain(t *testing.T) {
	h := hubtest.Start(t)
	ctx := context.Background()
	w := &wire{}
	c := client(t, h.Config, w)
	cms := h.Client.CoreV1().ConfigMaps("default")
	list, err := cms.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	first, err := c.CoreV1().ConfigMaps("default").Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer first.Stop()
	create := func(i int) {
		t.Helper()
		if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%d", i)}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	seen := 0
	expect := func(upTo int) {
		t.Helper()
		for ; seen < upTo; seen++ {
			ev := next(t, first)
			if name := ev.Object.(*corev1.ConfigMap).Name; ev.Type != watch.Added || name != fmt.Sprintf("cm-%d", seen) {
				t.Fatalf("event %d: %s %s, want ADDED cm-%d", seen, ev.Type, name, seen)
			}
		}
	}
	for i := range 3 {
		create(i)
	}
	expect(3)

	// A second watch joins: the stream is opened again, and what
	// happens meanwhile reaches the first watch once.
	second, err := c.CoreV1().Secrets("default").Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer second.Stop()
	for i := 3; i < 6; i++ {
		create(i)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if opened, _, _ := w.counts(); opened >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the stream was not opened again for the second watch")
		}
		time.Sleep(10 * time.Millisecond)
	}
	for i := 6; i < 9; i++ {
		create(i)
	}
	expect(9)
	select {
	case ev := <-first.ResultChan():
		t.Errorf("an event more: %s %v", ev.Type, ev.Object)
	case <-time.After(300 * time.Millisecond):
	}
	if _, open, gets := w.counts(); open != 1 || gets != 0 {
		t.Errorf("%d streams open and %d watches sent as GETs, want one stream", open, gets)
	}
}

// TestAnOlderHubGetsGETs: a hub that serves no multiplexed watches is
// sent each watch as its GET.
func TestAnOlderHubGetsGETs(t *testing.T) {
	h := hubtest.Start(t)
	ctx := context.Background()
	w := &wire{old: true}
	c := client(t, h.Config, w)
	wi, err := c.CoreV1().ConfigMaps("default").Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer wi.Stop()
	if _, err := h.Client.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for {
		ev := next(t, wi)
		if ev.Object.(*corev1.ConfigMap).Name == "x" {
			break
		}
	}
	if _, _, gets := w.counts(); gets != 1 {
		t.Errorf("%d watches sent as GETs, want 1", gets)
	}
}

// TestWatchesEndWhenTheHubIsGone: without a hub to resume from, the
// watches end as their own streams would, for their clients to ask again.
func TestWatchesEndWhenTheHubIsGone(t *testing.T) {
	h := hubtest.Start(t)
	ctx := context.Background()
	c := client(t, h.Config, &wire{})
	wi, err := c.CoreV1().ConfigMaps("default").Watch(ctx, metav1.ListOptions{ResourceVersion: "0"})
	if err != nil {
		t.Fatal(err)
	}
	defer wi.Stop()
	h.Stop()
	deadline := time.After(20 * time.Second)
	for {
		select {
		case _, ok := <-wi.ResultChan():
			if !ok {
				return
			}
		case <-deadline:
			t.Fatal("the watch did not end after the hub stopped")
		}
	}
}

// TestABusyHubsRetryAfterIsHonoured: a hub that refuses the stream with a
// Retry-After (starting, or too busy) is asked again after about that
// long, not after the short backoff of a stream that broke.
func TestABusyHubsRetryAfterIsHonoured(t *testing.T) {
	var mu sync.Mutex
	var opens []time.Time
	hub := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != agentapi.PathWatches {
			http.NotFound(w, r)
			return
		}
		mu.Lock()
		opens = append(opens, time.Now())
		mu.Unlock()
		w.Header().Set("Retry-After", "2")
		http.Error(w, "the hub is starting", http.StatusServiceUnavailable)
	}))
	defer hub.Close()
	tr := watchmux.New(http.DefaultTransport)
	for range 2 {
		// As a client that asks again at once.
		req, _ := http.NewRequest(http.MethodGet, hub.URL+"/api/v1/pods?watch=true", nil)
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "2" {
			t.Fatalf("the watch was answered %d (Retry-After %q), want the hub's 503 and its Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(opens) != 2 {
		t.Fatalf("the stream was opened %d times, want 2", len(opens))
	}
	if gap := opens[1].Sub(opens[0]); gap < time.Second || gap > 3*time.Second+500*time.Millisecond {
		t.Errorf("the stream was opened again %v after the hub said Retry-After: 2, want 1 s to 3 s", gap)
	}
}
