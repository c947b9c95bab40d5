package apiserver_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"flotilla.dev/flotilla/hub/hubtest"
)

// answers records the Content-Type of every response, by request path.
type answers struct {
	mu    sync.Mutex
	types map[string]string
	next  http.RoundTripper
}

func (a *answers) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := a.next.RoundTrip(r)
	if err == nil {
		a.mu.Lock()
		a.types[r.Method+" "+r.URL.Path+"?watch="+r.URL.Query().Get("watch")] = resp.Header.Get("Content-Type")
		a.mu.Unlock()
	}
	return resp, err
}

func (a *answers) of(key string) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.types[key]
}

// TestProtobufResponses: a client that asks for protobuf (client-go's
// typed clients as the agents configure them) gets its objects, lists and
// watch events in protobuf — with the events a field selector turns into
// additions and removals, and bookmarks — and Flotilla's own kinds, which
// have no protobuf encoding, in JSON.
func TestProtobufResponses(t *testing.T) {
	h := hubtest.Start(t)
	ctx := context.Background()
	seen := &answers{types: map[string]string{}}
	cfg := rest.CopyConfig(h.Config)
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	cfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { seen.next = rt; return seen })
	cs := kubernetes.NewForConfigOrDie(cfg)
	const proto = "application/vnd.kubernetes.protobuf"

	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Labels: map[string]string{"app": "a"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: testImage}}}}
	created, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := seen.of("POST /api/v1/namespaces/default/pods?watch="); got != proto {
		t.Errorf("create answered in %q, want %s", got, proto)
	}
	got, err := cs.CoreV1().Pods("default").Get(ctx, "p", metav1.GetOptions{})
	if err != nil || got.Spec.Containers[0].Image != testImage || got.ResourceVersion != created.ResourceVersion || got.Labels["app"] != "a" {
		t.Fatalf("get over protobuf: %v %+v", err, got)
	}
	list, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil || len(list.Items) != 1 || list.Items[0].Name != "p" || list.ResourceVersion == "" {
		t.Fatalf("list over protobuf: %v %+v", err, list)
	}
	if got := seen.of("GET /api/v1/pods?watch="); got != proto {
		t.Errorf("list answered in %q, want %s", got, proto)
	}

	// A device's watch of its pods: the binding adds the pod (an update
	// that the field selector turns into an addition); the deletion.
	w, err := cs.CoreV1().Pods("").Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion, AllowWatchBookmarks: true,
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", "dev-1").String()})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if got := seen.of("GET /api/v1/pods?watch=true"); !strings.HasPrefix(got, proto+";stream=watch") {
		t.Errorf("watch answered in %q, want %s;stream=watch", got, proto)
	}
	if err := cs.CoreV1().Pods("default").Bind(ctx, &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: "p"},
		Target: corev1.ObjectReference{Kind: "Node", Name: "dev-1"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	next := func(want watch.EventType) *corev1.Pod {
		t.Helper()
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatalf("the watch ended, want %s", want)
			}
			p, _ := ev.Object.(*corev1.Pod)
			if ev.Type != want || p == nil {
				t.Fatalf("event %s %T, want %s of a Pod", ev.Type, ev.Object, want)
			}
			return p
		case <-time.After(10 * time.Second):
			t.Fatalf("no %s event", want)
		}
		return nil
	}
	if p := next(watch.Added); p.Name != "p" || p.Spec.NodeName != "dev-1" {
		t.Errorf("added %s on %q, want p on dev-1", p.Name, p.Spec.NodeName)
	}
	if err := cs.CoreV1().Pods("default").Delete(ctx, "p", metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(0))}); err != nil {
		t.Fatal(err)
	}
	if p := next(watch.Deleted); p.Name != "p" {
		t.Errorf("deleted %s, want p", p.Name)
	}

	// A watch with the initial events ends them with a bookmark.
	if _, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	w2, err := cs.CoreV1().Pods("default").Watch(ctx, metav1.ListOptions{SendInitialEvents: ptr(true), AllowWatchBookmarks: true,
		ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan})
	if err != nil {
		t.Fatal(err)
	}
	defer w2.Stop()
	w = w2
	if p := next(watch.Added); p.Name != "p" {
		t.Errorf("initial event of %s, want p", p.Name)
	}
	if p := next(watch.Bookmark); p.Annotations[metav1.InitialEventsAnnotationKey] != "true" || p.ResourceVersion == "" {
		t.Errorf("the initial events' bookmark: %+v", p.ObjectMeta)
	}

	// Flotilla's kinds have no protobuf encoding: JSON, as asked second;
	// asked for protobuf alone, the hub says what it serves.
	rt, err := rest.TransportFor(h.Config)
	if err != nil {
		t.Fatal(err)
	}
	for accept, want := range map[string]int{proto + ", application/json": http.StatusOK, proto: http.StatusNotAcceptable} {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, h.Config.Host+"/apis/flotilla.dev/v1alpha1/namespaces/default/gitsources", nil)
		req.Header.Set("Accept", accept)
		resp, err := rt.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
			t.Errorf("GitSources with Accept %q: %d in %q, want %d in JSON", accept, resp.StatusCode, resp.Header.Get("Content-Type"), want)
		}
	}
}
