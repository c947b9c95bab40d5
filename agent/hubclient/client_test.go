package hubclient_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"

	"flotilla.dev/flotilla/agent/hubclient"
	"flotilla.dev/flotilla/api/agentapi"
	"flotilla.dev/flotilla/hub/hubtest"
)

// contentTypes records the content types of the requests a client sends.
type contentTypes struct {
	mu   sync.Mutex
	seen map[string]bool
	// streams counts the watches' streams opened, watchGETs the watches
	// sent as GETs of their own.
	streams, watchGETs int
	next               http.RoundTripper
}

func (c *contentTypes) RoundTrip(r *http.Request) (*http.Response, error) {
	c.mu.Lock()
	switch {
	case r.URL.Path == agentapi.PathWatches:
		// The watches' stream: its body names them, in JSON.
		c.streams++
	case r.URL.Query().Get("watch") != "":
		c.watchGETs++
	case r.Header.Get("Content-Type") != "":
		c.seen[r.Header.Get("Content-Type")] = true
	}
	c.mu.Unlock()
	return c.next.RoundTrip(r)
}

// TestAgainstHub runs every request the agent makes, of every kind it
// has a client for, against a real hub: paths, scopes, subresources,
// options and the protobuf bodies all have to be what the hub expects.
func TestAgainstHub(t *testing.T) {
	h := hubtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := rest.CopyConfig(h.Config)
	sent := &contentTypes{seen: map[string]bool{}}
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { sent.next = rt; return sent })
	c, err := hubclient.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}

	// Nodes: cluster-scoped, with a status subresource.
	nodes := c.CoreV1().Nodes()
	w, err := nodes.Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", "dev1").String()})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	n, err := nodes.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "dev1"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-w.ResultChan():
		if got, ok := ev.Object.(*corev1.Node); ev.Type != watch.Added || !ok || got.Name != "dev1" {
			t.Errorf("watch event %s %T", ev.Type, ev.Object)
		}
	case <-ctx.Done():
		t.Fatal("no watch event for the created node")
	}
	n.Labels = map[string]string{"site": "lab"}
	if n, err = nodes.Update(ctx, n, metav1.UpdateOptions{}); err != nil || n.Labels["site"] != "lab" {
		t.Fatalf("update: %v %v", n.Labels, err)
	}
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	n.Labels["lost"] = "yes" // not written through status
	if n, err = nodes.UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if got, err := nodes.Get(ctx, "dev1", metav1.GetOptions{}); err != nil || len(got.Status.Conditions) != 1 || got.Labels["lost"] != "" {
		t.Fatalf("after the status update: %v %v %v", got.Labels, got.Status.Conditions, err)
	}
	if got, err := nodes.Patch(ctx, "dev1", types.MergePatchType, []byte(`{"metadata":{"annotations":{"a":"b"}}}`), metav1.PatchOptions{}); err != nil || got.Annotations["a"] != "b" {
		t.Fatalf("patch: %v %v", got, err)
	}
	if l, err := nodes.List(ctx, metav1.ListOptions{LabelSelector: "site=lab"}); err != nil || len(l.Items) != 1 {
		t.Fatalf("list by label: %v %v", l, err)
	}

	// Pods: namespaced, with status, deleted with a precondition.
	pods := c.CoreV1().Pods("default")
	p, err := pods.Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: corev1.PodSpec{NodeName: "dev1", Containers: []corev1.Container{{Name: "app", Image: "registry.example/app@sha256:" + strings.Repeat("a", 64)}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Status.Phase = corev1.PodRunning
	if p, err = pods.UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil || p.Status.Phase != corev1.PodRunning {
		t.Fatalf("pod status: %v %v", p.Status.Phase, err)
	}
	if l, err := c.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=dev1"}); err != nil || len(l.Items) != 1 {
		t.Fatalf("pods of dev1: %v %v", l, err)
	}
	if err := pods.Delete(ctx, "web", metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: ptr.To(types.UID("other"))}}); !apierrors.IsConflict(err) {
		t.Errorf("delete with another UID: %v, want a conflict", err)
	}
	if err := pods.Delete(ctx, "web", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0), Preconditions: &metav1.Preconditions{UID: &p.UID}}); err != nil {
		t.Fatal(err)
	}

	// The other kinds the agent reads or writes.
	if _, err := c.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cfg"}, Data: map[string]string{"k": "v"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if l, err := c.CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{}); err != nil || len(l.Items) == 0 {
		t.Fatalf("configmaps: %v %v", l, err)
	}
	if _, err := c.CoreV1().Secrets("default").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s"}, Data: map[string][]byte{"k": []byte("v")}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if s, err := c.CoreV1().Secrets("default").Get(ctx, "s", metav1.GetOptions{}); err != nil || string(s.Data["k"]) != "v" {
		t.Fatalf("secret: %v %v", s, err)
	}
	if _, err := c.CoreV1().Services(metav1.NamespaceAll).List(ctx, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.DiscoveryV1().EndpointSlices("default").Create(ctx, &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: "web-1"}, AddressType: discoveryv1.AddressTypeIPv4}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if l, err := c.DiscoveryV1().EndpointSlices(metav1.NamespaceAll).List(ctx, metav1.ListOptions{}); err != nil || len(l.Items) == 0 {
		t.Fatalf("endpoint slices: %v %v", l, err)
	}
	leases := c.CoordinationV1().Leases("kube-node-lease")
	if _, err := leases.Get(ctx, "dev1", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("a missing lease: %v, want NotFound", err)
	}
	l, err := leases.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "dev1"}, Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("dev1")}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	l.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
	if l, err = leases.Update(ctx, l, metav1.UpdateOptions{}); err != nil || l.Spec.RenewTime == nil {
		t.Fatalf("lease renewal: %v %v", l, err)
	}

	// Events, through the recorder as the kubelet sends them.
	b := record.NewBroadcaster()
	defer b.Shutdown()
	b.StartRecordingToSink(&hubclient.EventSink{Client: c})
	rec := b.NewRecorder(hubclient.Scheme, corev1.EventSource{Component: "kubelet", Host: "dev1"})
	rec.Event(p, corev1.EventTypeNormal, "Pulled", "pulled it")
	rec.Event(p, corev1.EventTypeNormal, "Pulled", "pulled it") // the second is a patch of the first's count
	for {
		evs, err := c.CoreV1().Events("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(evs.Items) == 1 && evs.Items[0].Count == 2 && evs.Items[0].InvolvedObject.Name == "web" {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the recorder's events did not reach the hub: %+v", evs.Items)
		case <-time.After(50 * time.Millisecond):
		}
	}

	sent.mu.Lock()
	defer sent.mu.Unlock()
	if !sent.seen["application/vnd.kubernetes.protobuf"] || len(sent.seen) > 3 {
		t.Errorf("request bodies sent as %v, want protobuf (and the patches' types)", sent.seen)
	}
	if sent.streams == 0 || sent.watchGETs > 0 {
		t.Errorf("%d watches' streams opened and %d watches sent as GETs; want the watches on streams only", sent.streams, sent.watchGETs)
	}
}

// TestOneRateLimiter: the agent's QPS is a budget for the device, not
// for each group.
func TestOneRateLimiter(t *testing.T) {
	if _, err := hubclient.NewForConfig(&rest.Config{Host: "https://hub.example:6443", QPS: 5}); err == nil {
		t.Error("a QPS without a Burst was accepted")
	}
	c, err := hubclient.NewForConfig(&rest.Config{Host: "https://hub.example:6443", QPS: 50, Burst: 100})
	if err != nil {
		t.Fatal(err)
	}
	core := c.RESTClients()
	if len(core) != 3 || core[0].GetRateLimiter() == nil || core[0].GetRateLimiter() != core[1].GetRateLimiter() || core[0].GetRateLimiter() != core[2].GetRateLimiter() {
		t.Error("the groups do not share one rate limiter")
	}
}

var _ record.EventSink = (*hubclient.EventSink)(nil)
