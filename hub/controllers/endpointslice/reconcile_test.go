package endpointslice

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"

	"flotilla.dev/flotilla/api"
)

func service(ports ...corev1.ServicePort) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", UID: "svc-uid", Labels: map[string]string{"team": "shop"}},
		Spec:       corev1.ServiceSpec{Selector: map[string]string{"app": "web"}, Ports: ports},
	}
}

var httpPort = corev1.ServicePort{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromString("http")}

func pod(i int, ready bool, containerPort int32) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("web-%d", i), Namespace: "default", UID: types.UID(fmt.Sprintf("pod-%03d", i)), Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{NodeName: fmt.Sprintf("node-%d", i%3), Containers: []corev1.Container{{Name: "app",
			Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: containerPort, Protocol: corev1.ProtocolTCP}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: fmt.Sprintf("10.42.%d.%d", i/200, i%200+2)},
	}
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: st}}
	return p
}

// applyPlan plays the API for a plan: names for creations, replacement
// for updates.
func applyPlan(existing []*discoveryv1.EndpointSlice, p Plan, next *int) []*discoveryv1.EndpointSlice {
	byName := map[string]*discoveryv1.EndpointSlice{}
	for _, s := range existing {
		byName[s.Name] = s
	}
	for _, s := range p.Delete {
		delete(byName, s.Name)
	}
	for _, s := range p.Update {
		byName[s.Name] = s
	}
	for _, s := range p.Create {
		s = s.DeepCopy()
		*next++
		s.Name = fmt.Sprintf("%s%05d", s.GenerateName, *next)
		byName[s.Name] = s
	}
	var out []*discoveryv1.EndpointSlice
	for _, s := range byName {
		out = append(out, s)
	}
	return out
}

func TestSlicesOfAtMost100(t *testing.T) {
	svc := service(httpPort)
	var pods []*corev1.Pod
	for i := range 250 {
		pods = append(pods, pod(i, true, 8080))
	}
	plan := Reconcile(svc, Desired(svc, pods, nil), nil, MaxEndpointsPerSlice)
	if len(plan.Create) != 3 || len(plan.Update)+len(plan.Delete) != 0 {
		t.Fatalf("plan: %d creates %d updates %d deletes, want 3 creates", len(plan.Create), len(plan.Update), len(plan.Delete))
	}
	total := 0
	for _, s := range plan.Create {
		if len(s.Endpoints) > 100 {
			t.Errorf("slice with %d endpoints", len(s.Endpoints))
		}
		total += len(s.Endpoints)
		if s.Labels[api.LabelServiceName] != "web" || s.Labels[api.LabelManagedBy] != ManagedBy || s.Labels["team"] != "shop" {
			t.Errorf("labels %v", s.Labels)
		}
		if s.AddressType != discoveryv1.AddressTypeIPv4 {
			t.Errorf("addressType %s", s.AddressType)
		}
		if ref := metav1.GetControllerOf(s); ref == nil || ref.Kind != "Service" || ref.UID != svc.UID || !ptr.Deref(ref.BlockOwnerDeletion, false) {
			t.Errorf("owner %+v, want the Service", ref)
		}
		if len(s.Ports) != 1 || *s.Ports[0].Port != 8080 || *s.Ports[0].Name != "http" {
			t.Errorf("ports %+v, want http 8080", s.Ports)
		}
	}
	if total != 250 {
		t.Fatalf("%d endpoints, want 250", total)
	}
}

// TestMirrorPodsServeOnlyWhenBothAsk: a device writes its mirror pods,
// labels included; one is an endpoint only when its static manifest asks
// and the Service takes mirror pods.
func TestMirrorPodsServeOnlyWhenBothAsk(t *testing.T) {
	mirror := func(i int, ask bool) *corev1.Pod {
		p := pod(i, true, 8080)
		p.Annotations = map[string]string{api.AnnotationMirrorPod: "hash"}
		if ask {
			p.Annotations[api.AnnotationServiceEndpoint] = "true"
		}
		return p
	}
	pods := []*corev1.Pod{pod(1, true, 8080), mirror(2, false), mirror(3, true)}
	addresses := func(svc *corev1.Service) []string {
		var out []string
		for _, eps := range Desired(svc, pods, nil).endpoints {
			for _, ep := range eps {
				out = append(out, ep.Addresses...)
			}
		}
		slices.Sort(out)
		return out
	}
	svc := service(httpPort)
	if got := addresses(svc); !slices.Equal(got, []string{"10.42.0.3"}) {
		t.Errorf("a Service that takes no mirror pods: endpoints %v, want only the ordinary pod's", got)
	}
	svc.Annotations = map[string]string{api.AnnotationMirrorEndpoints: "true"}
	if got := addresses(svc); !slices.Equal(got, []string{"10.42.0.3", "10.42.0.5"}) {
		t.Errorf("a Service that takes mirror pods: endpoints %v, want the ordinary pod's and the mirror pod's that asks", got)
	}
}

func TestNamedPortResolvedPerPod(t *testing.T) {
	svc := service(httpPort)
	pods := []*corev1.Pod{pod(1, true, 8080), pod(2, true, 9090), pod(3, true, 8080)}
	noPort := pod(4, true, 0)
	noPort.Spec.Containers[0].Ports = nil // the name resolves to nothing: no port for this pod
	pods = append(pods, noPort)
	plan := Reconcile(svc, Desired(svc, pods, nil), nil, MaxEndpointsPerSlice)
	got := map[string]int{}
	for _, s := range plan.Create {
		k := "none"
		if len(s.Ports) == 1 {
			k = fmt.Sprint(*s.Ports[0].Port)
		}
		got[k] += len(s.Endpoints)
	}
	if got["8080"] != 2 || got["9090"] != 1 || got["none"] != 1 || len(plan.Create) != 3 {
		t.Fatalf("endpoints by port %v in %d slices; want 8080:2 9090:1 none:1 in 3", got, len(plan.Create))
	}
}

func TestConditions(t *testing.T) {
	ready := pod(1, true, 8080)
	notReady := pod(2, false, 8080)
	terminating := pod(3, true, 8080)
	terminating.DeletionTimestamp = ptr.To(metav1.Now())
	noIP := pod(4, true, 8080)
	noIP.Status.PodIP = ""
	v6 := pod(5, true, 8080)
	v6.Status.PodIP = "fd00::5"
	done := pod(6, false, 8080)
	done.Spec.RestartPolicy = corev1.RestartPolicyNever
	done.Status.Phase = corev1.PodSucceeded

	type cond struct{ ready, serving, terminating bool }
	check := func(svc *corev1.Service, want map[string]cond) {
		t.Helper()
		plan := Reconcile(svc, Desired(svc, []*corev1.Pod{ready, notReady, terminating, noIP, v6, done}, nil), nil, 100)
		got := map[string]cond{}
		for _, s := range plan.Create {
			for _, ep := range s.Endpoints {
				got[ep.TargetRef.Name] = cond{*ep.Conditions.Ready, *ep.Conditions.Serving, *ep.Conditions.Terminating}
				if ep.NodeName == nil || *ep.NodeName == "" {
					t.Errorf("%s: no nodeName", ep.TargetRef.Name)
				}
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("conditions %v, want %v", got, want)
		}
	}
	check(service(httpPort), map[string]cond{
		"web-1": {true, true, false},
		"web-2": {false, false, false},
		"web-3": {false, true, true},
	})
	svc := service(httpPort)
	svc.Spec.PublishNotReadyAddresses = true
	check(svc, map[string]cond{
		"web-1": {true, true, false},
		"web-2": {true, true, false},
		"web-3": {true, true, true},
	})
}

func TestMinimalChurn(t *testing.T) {
	svc := service(httpPort)
	var pods []*corev1.Pod
	for i := range 250 {
		pods = append(pods, pod(i, true, 8080))
	}
	next := 0
	slices := applyPlan(nil, Reconcile(svc, Desired(svc, pods, nil), nil, 100), &next)

	if p := Reconcile(svc, Desired(svc, pods, nil), slices, 100); len(p.Create)+len(p.Update)+len(p.Delete) != 0 {
		t.Fatalf("in-sync state planned %d/%d/%d writes, want none", len(p.Create), len(p.Update), len(p.Delete))
	}
	// One pod stops being ready: one slice rewritten.
	pods[7] = pod(7, false, 8080)
	p := Reconcile(svc, Desired(svc, pods, nil), slices, 100)
	if len(p.Update) != 1 || len(p.Create)+len(p.Delete) != 0 {
		t.Fatalf("one readiness change planned %d/%d/%d writes, want 1 update", len(p.Create), len(p.Update), len(p.Delete))
	}
	slices = applyPlan(slices, p, &next)
	// One pod replaced by another: the newcomer takes the freed place in
	// the slice that is being written anyway.
	pods[8] = pod(900, true, 8080)
	p = Reconcile(svc, Desired(svc, pods, nil), slices, 100)
	if len(p.Update) != 1 || len(p.Create)+len(p.Delete) != 0 {
		t.Fatalf("a replaced pod planned %d/%d/%d writes, want 1 update", len(p.Create), len(p.Update), len(p.Delete))
	}
	slices = applyPlan(slices, p, &next)
	// Everything gone: one empty placeholder slice remains.
	p = Reconcile(svc, Desired(svc, nil, nil), slices, 100)
	slices = applyPlan(slices, p, &next)
	if len(slices) != 1 || len(slices[0].Endpoints) != 0 || len(p.Create) != 0 {
		t.Fatalf("no pods: %d slices (created %d), want the placeholder reused from an existing slice", len(slices), len(p.Create))
	}
	if p := Reconcile(svc, Desired(svc, nil, nil), slices, 100); len(p.Create)+len(p.Update)+len(p.Delete) != 0 {
		t.Fatalf("placeholder state planned writes: %+v", p)
	}
}

func TestSyncCreatesOnceUntilObserved(t *testing.T) {
	svc := service(httpPort)
	p1 := pod(1, true, 8080)
	client := fake.NewClientset(svc, p1)
	n := 0
	client.PrependReactor("create", "endpointslices", func(a k8stesting.Action) (bool, runtime.Object, error) {
		s := a.(k8stesting.CreateAction).GetObject().(*discoveryv1.EndpointSlice)
		n++
		s.Name = fmt.Sprintf("%s%05d", s.GenerateName, n)
		return false, nil, nil
	})
	factory := informers.NewSharedInformerFactory(client, 0)
	c, err := New(client, factory, record.NewFakeRecorder(10), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := factory.Core().V1().Services().Informer().GetIndexer().Add(svc); err != nil {
		t.Fatal(err)
	}
	if err := factory.Core().V1().Pods().Informer().GetIndexer().Add(p1); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for range 2 { // the slice informer has not seen the creation
		if err := c.sync(ctx, "default/web"); err != nil {
			t.Fatal(err)
		}
	}
	l, _ := client.DiscoveryV1().EndpointSlices("default").List(ctx, metav1.ListOptions{})
	if len(l.Items) != 1 {
		t.Fatalf("%d slices, want 1 (no duplicate before the watch caught up)", len(l.Items))
	}
	s := &l.Items[0]
	if err := factory.Discovery().V1().EndpointSlices().Informer().GetIndexer().Add(s); err != nil {
		t.Fatal(err)
	}
	c.sliceEvent(s, true, false)
	// Pod 2 appears: the existing slice is updated, not a second created.
	p2 := pod(2, true, 8080)
	if err := factory.Core().V1().Pods().Informer().GetIndexer().Add(p2); err != nil {
		t.Fatal(err)
	}
	if err := c.sync(ctx, "default/web"); err != nil {
		t.Fatal(err)
	}
	l, _ = client.DiscoveryV1().EndpointSlices("default").List(ctx, metav1.ListOptions{})
	if len(l.Items) != 1 || len(l.Items[0].Endpoints) != 2 {
		t.Fatalf("%d slices, want 1 with 2 endpoints", len(l.Items))
	}
}
