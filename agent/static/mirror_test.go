package static

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"flotilla.dev/flotilla/agent/hubclient/fromclientset"
	"flotilla.dev/flotilla/api"
	"flotilla.dev/flotilla/internal/testlog"
)

// fakeSource is a settable static pod set.
type fakeSource struct {
	mu   sync.Mutex
	pods []*corev1.Pod
}

func (f *fakeSource) List() []*corev1.Pod {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*corev1.Pod(nil), f.pods...)
}

func (f *fakeSource) set(pods ...*corev1.Pod) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pods = pods
}

// staticPod is a static pod as Source makes it.
func staticPod(t *testing.T, name, image string) *corev1.Pod {
	t.Helper()
	res := decodeFile("/m/"+name+".yaml", []byte(podYAML(name, image)), node)
	if res.err != nil {
		t.Fatal(res.err)
	}
	return res.pods[0]
}

// hubPod is a pod as the hub stores it.
func hubPod(name, nodeName, mirrorHash string) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("hub-" + name + "-" + nodeName), ResourceVersion: "5"},
		Spec:       corev1.PodSpec{NodeName: nodeName, Containers: []corev1.Container{{Name: "c", Image: "example.com/x:1"}}},
	}
	if mirrorHash != "" {
		p.Annotations = map[string]string{api.AnnotationMirrorPod: mirrorHash}
	}
	return p
}

// writes returns the mutating actions the fake clientset saw.
func writes(c *fake.Clientset) []k8stesting.Action {
	var out []k8stesting.Action
	for _, a := range c.Actions() {
		if a.GetVerb() != "list" && a.GetVerb() != "get" && a.GetVerb() != "watch" {
			out = append(out, a)
		}
	}
	return out
}

func quietLog() *slog.Logger { return slog.New(slog.DiscardHandler) }

func TestMirrorPod(t *testing.T) {
	st := staticPod(t, "web", "example.com/web:1")
	st.OwnerReferences = []metav1.OwnerReference{{Kind: "Node", Name: node}}
	m := MirrorPod(st)
	if m.Name != "web-"+node || m.Namespace != "default" || m.Spec.NodeName != node || m.Labels["app"] != "web" {
		t.Fatalf("identity: %s/%s node %q labels %v", m.Namespace, m.Name, m.Spec.NodeName, m.Labels)
	}
	if m.Annotations[api.AnnotationMirrorPod] != string(st.UID) {
		t.Fatalf("mirror annotation %q, want the config hash %s", m.Annotations[api.AnnotationMirrorPod], st.UID)
	}
	if m.UID != "" || m.ResourceVersion != "" || len(m.OwnerReferences) != 0 {
		t.Fatalf("server fields leaked: uid %q rv %q owners %v", m.UID, m.ResourceVersion, m.OwnerReferences)
	}
	m.Labels["app"] = "changed"
	m.Spec.Containers[0].Image = "changed"
	if st.Labels["app"] != "web" || st.Spec.Containers[0].Image != "example.com/web:1" {
		t.Fatal("the mirror shares memory with the static pod")
	}
}

func TestMirrorerSync(t *testing.T) {
	web := staticPod(t, "web", "example.com/web:2")
	db := staticPod(t, "db", "example.com/db:1")
	src := &fakeSource{}
	src.set(web, db)

	staleWeb := hubPod("web-"+node, node, "old-hash")
	gone := hubPod("gone-"+node, node, "some-hash")
	plain := hubPod("plain", node, "")                // a hub pod bound here, not a mirror
	foreign := hubPod("x-node2", "node2", "its-hash") // another device's mirror
	client := fake.NewClientset(staleWeb, gone, plain, foreign)

	m := NewMirrorer(fromclientset.New(client), src, node, quietLog())
	if err := m.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}

	var deleted, created []string
	for _, a := range writes(client) {
		switch a := a.(type) {
		case k8stesting.DeleteAction:
			deleted = append(deleted, a.GetName())
			opts := a.GetDeleteOptions()
			if opts.Preconditions == nil || opts.Preconditions.UID == nil || *opts.Preconditions.UID != types.UID("hub-"+a.GetName()+"-"+node) {
				t.Errorf("delete of %s without the right UID precondition: %+v", a.GetName(), opts.Preconditions)
			}
		case k8stesting.CreateAction:
			created = append(created, a.GetObject().(*corev1.Pod).Name)
		default:
			t.Errorf("unexpected write %s %s", a.GetVerb(), a.GetResource().Resource)
		}
	}
	if !sameSet(deleted, []string{"web-" + node, "gone-" + node}) {
		t.Errorf("deleted %v", deleted)
	}
	if !sameSet(created, []string{"web-" + node, "db-" + node}) {
		t.Errorf("created %v", created)
	}

	pods, err := client.CoreV1().Pods("").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]*corev1.Pod{}
	for i := range pods.Items {
		byName[pods.Items[i].Name] = &pods.Items[i]
	}
	if len(byName) != 4 || byName["plain"] == nil || byName["x-node2"] == nil || byName["gone-"+node] != nil {
		t.Fatalf("pods on the hub: %v", keys(byName))
	}
	if h := byName["web-"+node].Annotations[api.AnnotationMirrorPod]; h != string(web.UID) {
		t.Fatalf("web mirror hash %q, want %s", h, web.UID)
	}

	// Nothing changed: a second pass lists and writes nothing.
	before := len(writes(client))
	if err := m.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	if after := len(writes(client)); after != before {
		t.Fatalf("second Sync wrote %d times: %v", after-before, writes(client)[before:])
	}
}

func TestMirrorerRecreatesMirrorBeingDeleted(t *testing.T) {
	web := staticPod(t, "web", "example.com/web:1")
	terminating := hubPod("web-"+node, node, string(web.UID))
	now := metav1.Now()
	terminating.DeletionTimestamp = &now
	client := fake.NewClientset(terminating)
	m := NewMirrorer(fromclientset.New(client), &fakeSource{pods: []*corev1.Pod{web}}, node, quietLog())
	if err := m.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	var verbs []string
	for _, a := range writes(client) {
		verbs = append(verbs, a.GetVerb())
	}
	if len(verbs) != 2 || verbs[0] != "delete" || verbs[1] != "create" {
		t.Fatalf("writes %v, want delete then create", verbs)
	}
	p, err := client.CoreV1().Pods("default").Get(context.Background(), "web-"+node, metav1.GetOptions{})
	if err != nil || p.DeletionTimestamp != nil {
		t.Fatalf("mirror after Sync: %v %v", p, err)
	}
}

func TestMirrorerLeavesNonMirrorOfSameName(t *testing.T) {
	web := staticPod(t, "web", "example.com/web:1")
	client := fake.NewClientset(hubPod("web-"+node, node, ""))
	m := NewMirrorer(fromclientset.New(client), &fakeSource{pods: []*corev1.Pod{web}}, node, quietLog())
	err := m.Sync(context.Background())
	if err == nil {
		t.Fatal("a name clash with a non-mirror pod was not reported")
	}
	if w := writes(client); len(w) != 0 {
		t.Fatalf("writes %v, want none", w)
	}
}

func TestMirrorerRunSurvivesAnUnreachableHub(t *testing.T) {
	client := fake.NewClientset()
	var mu sync.Mutex
	down := true
	client.PrependReactor("list", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		if down {
			return true, nil, errors.New("dial tcp: connection refused")
		}
		return false, nil, nil
	})
	src := &fakeSource{}
	logs := &testlog.Buffer{}
	m := NewMirrorer(fromclientset.New(client), src, node, slog.New(slog.NewTextHandler(logs, nil)))
	ctx, cancel := context.WithCancel(context.Background())
	poke := make(chan struct{}, 1)
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx, poke) }()

	src.set(staticPod(t, "web", "example.com/web:1"))
	poke <- struct{}{}
	time.Sleep(1200 * time.Millisecond) // a few failed attempts with backoff
	select {
	case err := <-done:
		t.Fatalf("Run returned %v while the hub was away", err)
	default:
	}
	mu.Lock()
	down = false
	mu.Unlock()
	poke <- struct{}{} // a poke does not wait for the backoff

	deadline := time.Now().Add(time.Second)
	for {
		if p, err := client.CoreV1().Pods("default").Get(ctx, "web-"+node, metav1.GetOptions{}); err == nil && p.Annotations[api.AnnotationMirrorPod] != "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no mirror after the hub came back")
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run returned %v at ctx end, want nil", err)
	}
	out := logs.String()
	if n := countLines(out, "level=WARN"); n != 1 {
		t.Errorf("%d Warn lines for one outage, want 1:\n%s", n, out)
	}
	if countLines(out, "in sync with the hub again") != 1 {
		t.Errorf("no recovery Info:\n%s", out)
	}
}

func countLines(s, sub string) int {
	n := 0
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			n++
		}
	}
	return n
}

func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	seen := map[string]int{}
	for _, x := range a {
		seen[x]++
	}
	for _, x := range b {
		seen[x]--
		if seen[x] < 0 {
			return false
		}
	}
	return true
}

func keys[V any](m map[string]V) []string {
	return sortedKeys(m)
}
