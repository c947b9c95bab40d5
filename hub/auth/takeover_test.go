package auth_test

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"flotilla.dev/flotilla/api"
	"flotilla.dev/flotilla/hub"
	"flotilla.dev/flotilla/hub/controllers/manager"
	"flotilla.dev/flotilla/hub/controllers/replicaset"
	"flotilla.dev/flotilla/hub/hubtest"
	"flotilla.dev/flotilla/test/simdevice"
)

const digestImage = "registry.local/shop@sha256:0000000000000000000000000000000000000000000000000000000000000001"

// TestDeviceCannotTakeOverAService plays a stolen device against a hub
// running every controller: before the ReplicaSet web exists, the device
// "evil" makes mirror pods labelled like web's pods, marks them Running and
// Ready with addresses of its choosing and a high pod-deletion-cost. The
// ReplicaSet must still run its own two replicas on the shop devices, and
// the Service's endpoints must be those replicas only. (Against the hub
// before issue 17, the ReplicaSet adopted the two fakes, never started a
// replica, and the Service sent every connection to the device.)
func TestDeviceCannotTakeOverAService(t *testing.T) {
	h := hubtest.Start(t, hubtest.Options{Loops: []hub.Loop{{
		Name: "controllers",
		Run:  func(ctx context.Context, cfg *rest.Config) error { return manager.Run(ctx, cfg, manager.Options{}) },
	}}})
	ctx, cancel := context.WithCancel(context.Background())
	fleet, err := simdevice.StartFleet(ctx, h.Client, []simdevice.Config{
		{Name: "shop-a", Labels: map[string]string{"site": "shop"}},
		{Name: "shop-b", Labels: map[string]string{"site": "shop"}},
	})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		if err := fleet.Wait(); err != nil {
			t.Errorf("devices: %v", err)
		}
	})
	bg := context.Background()
	admin := h.Client

	// The stolen device registers its Node and gets a pod CIDR.
	evil := h.NodeClient("evil")
	_, err = evil.CoreV1().Nodes().Create(bg, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "evil",
		Labels: map[string]string{api.LabelHostname: "evil"}}}, metav1.CreateOptions{})
	must(t, err)
	var evilCIDR netip.Prefix
	poll(t, "the evil Node's pod CIDR", func(ctx context.Context) (bool, error) {
		n, err := admin.CoreV1().Nodes().Get(ctx, "evil", metav1.GetOptions{})
		if err != nil || n.Spec.PodCIDR == "" {
			return false, err
		}
		evilCIDR, err = netip.ParsePrefix(n.Spec.PodCIDR)
		return true, err
	})
	// Its address, as agents report it.
	must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := evil.CoreV1().Nodes().Get(bg, "evil", metav1.GetOptions{})
		if err != nil {
			return err
		}
		n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "192.0.2.66"}}
		_, err = evil.CoreV1().Nodes().UpdateStatus(bg, n, metav1.UpdateOptions{})
		return err
	}))

	webLabels := map[string]string{"app": "web"}
	fake := func(name string, mutate func(*corev1.Pod)) *corev1.Pod {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: webLabels,
				Annotations: map[string]string{api.AnnotationMirrorPod: "hash-" + name}},
			Spec: corev1.PodSpec{NodeName: "evil", Containers: []corev1.Container{{Name: "app", Image: digestImage,
				Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8000}}}}},
		}
		if mutate != nil {
			mutate(p)
		}
		return p
	}

	// Each step of the attack: a refusal is what the hub must answer; the
	// device then goes on with the closest thing the hub allows, so that
	// every later defence is tested on its own.
	refused := func(what string, err error) bool {
		t.Helper()
		if err == nil {
			t.Errorf("the device could %s", what)
			return false
		}
		if !apierrors.IsForbidden(err) {
			t.Fatalf("%s: err = %v, want 403 Forbidden", what, err)
		}
		return true
	}
	_, err = evil.CoreV1().Pods("default").Create(bg, fake("owned-evil", func(p *corev1.Pod) {
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: "evil", UID: "x"}}
	}), metav1.CreateOptions{})
	refused("create a mirror pod with an owner reference", err)
	_, err = evil.CoreV1().Pods("default").Create(bg, fake("hashed-evil", func(p *corev1.Pod) {
		p.Labels = map[string]string{"app": "web", api.LabelPodTemplateHash: "5d4b9c7f8"}
	}), metav1.CreateOptions{})
	refused("create a mirror pod with a label a controller owns ("+api.LabelPodTemplateHash+")", err)

	var fakes []string
	for i := 1; i <= 2; i++ {
		name := fmt.Sprintf("web-%d-evil", i)
		_, err := evil.CoreV1().Pods("default").Create(bg, fake(name, func(p *corev1.Pod) {
			p.Annotations[replicaset.AnnotationPodDeletionCost] = "2147483647"
		}), metav1.CreateOptions{})
		if refused("create a mirror pod with "+replicaset.AnnotationPodDeletionCost, err) {
			_, err = evil.CoreV1().Pods("default").Create(bg, fake(name, nil), metav1.CreateOptions{})
			must(t, err)
		}
		fakes = append(fakes, name)

		// Running and Ready, at an address outside its pod CIDR (one a
		// real pod on another device could have); then inside it.
		setStatus := func(ip, host string) error {
			p, err := evil.CoreV1().Pods("default").Get(bg, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			now := metav1.Now()
			p.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}, StartTime: &now,
				HostIP: host,
				Conditions: []corev1.PodCondition{
					{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(now.Add(-time.Hour))},
					{Type: corev1.ContainersReady, Status: corev1.ConditionTrue},
				},
				ContainerStatuses: []corev1.ContainerStatus{{Name: "app", Ready: true, Image: digestImage,
					State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}}}}
			_, err = evil.CoreV1().Pods("default").UpdateStatus(bg, p, metav1.UpdateOptions{})
			return err
		}
		inside := evilCIDR.Addr().Next()
		for j := 0; j < 10+i; j++ {
			inside = inside.Next()
		}
		refused("report another device's address as the pod's host", setStatus(inside.String(), "192.0.2.10"))
		if refused("report a pod address outside its pod CIDR", setStatus(fmt.Sprintf("10.99.0.%d", i), "192.0.2.66")) {
			must(t, setStatus(inside.String(), "192.0.2.66"))
		}
	}

	// The people who run the shop deploy web.
	_, err = admin.CoreV1().Services("default").Create(bg, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: corev1.ServiceSpec{Selector: webLabels, Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromString("http")}}}}, metav1.CreateOptions{})
	must(t, err)
	_, err = admin.AppsV1().ReplicaSets("default").Create(bg, &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
		Spec: appsv1.ReplicaSetSpec{Replicas: ptr.To[int32](2), Selector: &metav1.LabelSelector{MatchLabels: webLabels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: webLabels},
				Spec: corev1.PodSpec{NodeSelector: map[string]string{"site": "shop"}, Containers: []corev1.Container{{Name: "app", Image: digestImage,
					Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8000}}}}}}},
	}, metav1.CreateOptions{})
	must(t, err)

	// The ReplicaSet settles: two Ready replicas of its own, or (with the
	// fakes adopted) two Ready "replicas" the device made.
	poll(t, "the ReplicaSet to have two ready replicas", func(ctx context.Context) (bool, error) {
		r, err := admin.AppsV1().ReplicaSets("default").Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return r.Status.ObservedGeneration >= r.Generation && r.Status.ReadyReplicas == 2 && r.Status.Replicas == 2, nil
	})
	pods, err := admin.CoreV1().Pods("default").List(bg, metav1.ListOptions{LabelSelector: "app=web"})
	must(t, err)
	var mine []string
	realIPs := map[string]bool{}
	for _, p := range pods.Items {
		ref := metav1.GetControllerOf(&p)
		switch {
		case slices.Contains(fakes, p.Name):
			if ref != nil {
				t.Errorf("the ReplicaSet adopted the device's pod %s", p.Name)
			}
		case ref != nil && ref.Kind == "ReplicaSet" && ref.Name == "web" && p.DeletionTimestamp == nil:
			mine = append(mine, p.Name)
			if p.Spec.NodeName == "evil" {
				t.Errorf("a replica runs on the device: %s", p.Name)
			}
		}
	}
	if len(mine) != 2 {
		t.Errorf("the ReplicaSet runs %d replicas of its own (%v), want 2", len(mine), mine)
	}
	// The endpoints: the ReplicaSet's replicas, once Ready.
	poll(t, "the Service's endpoints to list the ReplicaSet's replicas", func(ctx context.Context) (bool, error) {
		for _, name := range mine {
			p, err := admin.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
			if err != nil || p.Status.PodIP == "" {
				return false, err
			}
			realIPs[p.Status.PodIP] = true
		}
		return len(realIPs) == len(mine), nil
	})
	want := sortedKeys(realIPs)
	var got []string
	poll(t, "the endpoints to settle", func(ctx context.Context) (bool, error) {
		got = endpointAddresses(ctx, t, admin, "web")
		return slices.Equal(got, want) || len(got) > len(want), nil
	})
	if !slices.Equal(got, want) {
		t.Errorf("the Service web sends connections to %v, want only its replicas %v", got, want)
	}
}

func endpointAddresses(ctx context.Context, t *testing.T, c kubernetes.Interface, svc string) []string {
	t.Helper()
	list, err := c.DiscoveryV1().EndpointSlices("default").List(ctx, metav1.ListOptions{LabelSelector: api.LabelServiceName + "=" + svc})
	must(t, err)
	var out []string
	for _, s := range list.Items {
		for _, ep := range s.Endpoints {
			out = append(out, ep.Addresses...)
		}
	}
	sort.Strings(out)
	return out
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func poll(t *testing.T, what string, cond func(ctx context.Context) (bool, error)) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 30*time.Second, true, cond); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}
