package auth_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"

	"flotilla.dev/flotilla/api"
	"flotilla.dev/flotilla/hub/apiserver"
	"flotilla.dev/flotilla/hub/audit"
	"flotilla.dev/flotilla/hub/auth"
	"flotilla.dev/flotilla/hub/hubtest"
	"flotilla.dev/flotilla/hub/pki"
)

func clientAs(t *testing.T, h *hubtest.Hub, user string, groups []string, ttl time.Duration) kubernetes.Interface {
	t.Helper()
	cert, key, err := h.PKI().IssueClientCert(user, groups, ttl)
	if err != nil {
		t.Fatal(err)
	}
	return clientWith(t, h, cert, key)
}

func clientWith(t *testing.T, h *hubtest.Hub, cert, key []byte) kubernetes.Interface {
	t.Helper()
	cfg := &rest.Config{Host: h.URL(), TLSClientConfig: rest.TLSClientConfig{CAData: h.PKI().CACertPEM(), CertData: cert, KeyData: key}, QPS: 1000, Burst: 1000}
	return kubernetes.NewForConfigOrDie(cfg)
}

func pod(name, node string, mutate ...func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "example.com/app:1"}}},
	}
	for _, m := range mutate {
		m(p)
	}
	return p
}

func usesSecretAndConfigMap(secret, cm string) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Spec.Volumes = []corev1.Volume{{Name: "s", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: secret}}}}
		p.Spec.Containers[0].EnvFrom = []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: cm}}}}
	}
}

func mirror(p *corev1.Pod) {
	p.Annotations = map[string]string{api.AnnotationMirrorPod: "hash"}
}

func event(name, ns string, about corev1.ObjectReference) *corev1.Event {
	return &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, InvolvedObject: about,
		Reason: "Started", Message: "started", Type: "Normal"}
}

// setPodIP writes the pod's addresses in its status, as a device's
// status manager does.
func setPodIP(ctx context.Context, pods typedcorev1.PodInterface, name string, ips ...string) error {
	p, err := pods.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	p.Status.PodIP, p.Status.PodIPs = ips[0], nil
	for _, ip := range ips {
		p.Status.PodIPs = append(p.Status.PodIPs, corev1.PodIP{IP: ip})
	}
	_, err = pods.UpdateStatus(ctx, p, metav1.UpdateOptions{})
	return err
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestNodeAuthorization is the table of what a device may do, run through
// the real API with a real device certificate: every rule, for its own
// objects and another device's.
func TestNodeAuthorization(t *testing.T) {
	h := hubtest.Start(t, hubtest.Options{AllowTagImages: true})
	ctx := context.Background()
	admin := h.Client
	core := admin.CoreV1()

	for i, n := range []string{"a", "b"} {
		_, err := core.Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n,
			Labels: map[string]string{"site": "shop-1", api.LabelHostname: n}},
			Spec:   corev1.NodeSpec{Taints: []corev1.Taint{{Key: "dedicated", Value: "kiosk", Effect: corev1.TaintEffectNoSchedule}}},
			Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: fmt.Sprintf("192.0.2.%d", i+10)}}}}, metav1.CreateOptions{})
		must(t, err)
		_, err = admin.CoordinationV1().Leases(api.NamespaceNodeLease).Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: n}}, metav1.CreateOptions{})
		must(t, err)
	}
	for _, s := range []string{"sa", "sb", "unused"} {
		_, err := core.Secrets("default").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: s}, StringData: map[string]string{"k": "v"}}, metav1.CreateOptions{})
		must(t, err)
		_, err = core.ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "c" + s}}, metav1.CreateOptions{})
		must(t, err)
	}
	for _, p := range []*corev1.Pod{
		pod("pa", "a", usesSecretAndConfigMap("sa", "csa")),
		pod("pa-going", "a"),
		pod("pb", "b", usesSecretAndConfigMap("sb", "csb")),
		pod("unbound", ""),
		pod("pa-host", "a", func(p *corev1.Pod) { p.Spec.HostNetwork = true }),
	} {
		_, err := core.Pods("default").Create(ctx, p, metav1.CreateOptions{})
		must(t, err)
	}
	// An admin starts the deletion of a pod on a; the device finishes it.
	must(t, core.Pods("default").Delete(ctx, "pa-going", metav1.DeleteOptions{}))
	_, err := core.Services("default").Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}}}, metav1.CreateOptions{})
	must(t, err)

	// Events the devices did not write.
	for _, e := range []*corev1.Event{
		{ObjectMeta: metav1.ObjectMeta{Name: "pb.1", Namespace: "default"}, InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: "default", Name: "pb"}, Reason: "Started", Type: "Normal"},
		{ObjectMeta: metav1.ObjectMeta{Name: "pa.0", Namespace: "default"}, InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: "default", Name: "pa"}, Reason: "Pulled", Type: "Normal"},
	} {
		_, err := core.Events("default").Create(ctx, e, metav1.CreateOptions{})
		must(t, err)
	}

	a := clientAs(t, h, "system:node:a", []string{auth.GroupNodes}, time.Hour)
	pods := a.CoreV1().Pods("default")
	nodes := a.CoreV1().Nodes()
	leases := a.CoordinationV1().Leases(api.NamespaceNodeLease)

	// The graph fills from a watch; wait until the device sees its pod.
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := pods.Get(ctx, "pa", metav1.GetOptions{}); err == nil {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("device a cannot read its own pod: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}

	nodeA := func() *corev1.Node {
		n, err := nodes.Get(ctx, "a", metav1.GetOptions{})
		must(t, err)
		return n
	}
	statusPatch := []byte(`{"status":{"message":"running on a"}}`)
	cases := []struct {
		name    string
		allowed bool
		do      func() error
	}{
		{"get own pod", true, func() error { _, err := pods.Get(ctx, "pa", metav1.GetOptions{}); return err }},
		{"get other node's pod", false, func() error { _, err := pods.Get(ctx, "pb", metav1.GetOptions{}); return err }},
		{"get unbound pod", false, func() error { _, err := pods.Get(ctx, "unbound", metav1.GetOptions{}); return err }},
		{"list own pods", true, func() error {
			_, err := a.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=a"})
			return err
		}},
		{"list all pods", false, func() error { _, err := a.CoreV1().Pods("").List(ctx, metav1.ListOptions{}); return err }},
		{"list other node's pods", false, func() error {
			_, err := a.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=b"})
			return err
		}},
		{"watch own pods", true, func() error {
			w, err := a.CoreV1().Pods("").Watch(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=a"})
			if err == nil {
				w.Stop()
			}
			return err
		}},
		{"watch all pods", false, func() error {
			w, err := a.CoreV1().Pods("").Watch(ctx, metav1.ListOptions{})
			if err == nil {
				w.Stop()
			}
			return err
		}},
		{"patch own pod status", true, func() error {
			_, err := pods.Patch(ctx, "pa", types.MergePatchType, statusPatch, metav1.PatchOptions{}, "status")
			return err
		}},
		{"patch other node's pod status", false, func() error {
			_, err := pods.Patch(ctx, "pb", types.MergePatchType, statusPatch, metav1.PatchOptions{}, "status")
			return err
		}},
		{"change own pod's spec", false, func() error {
			_, err := pods.Patch(ctx, "pa", types.MergePatchType, []byte(`{"metadata":{"labels":{"x":"y"}}}`), metav1.PatchOptions{})
			return err
		}},
		{"create an ordinary pod", false, func() error { _, err := pods.Create(ctx, pod("rogue", "a"), metav1.CreateOptions{}); return err }},
		{"create own mirror pod", true, func() error {
			_, err := pods.Create(ctx, pod("static-a", "a", mirror), metav1.CreateOptions{})
			return err
		}},
		{"create mirror pod for another node", false, func() error {
			_, err := pods.Create(ctx, pod("static-b", "b", mirror), metav1.CreateOptions{})
			return err
		}},
		{"create mirror pod that references a secret", false, func() error {
			_, err := pods.Create(ctx, pod("static-s", "a", mirror, usesSecretAndConfigMap("sb", "csb")), metav1.CreateOptions{})
			return err
		}},
		{"delete own running pod", false, func() error { return pods.Delete(ctx, "pa", metav1.DeleteOptions{}) }},
		{"finish deleting own pod", true, func() error {
			return pods.Delete(ctx, "pa-going", metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
		}},
		{"an admin changes a mirror pod", false, func() error {
			_, err := core.Pods("default").Patch(ctx, "static-a", types.MergePatchType, []byte(`{"metadata":{"labels":{"app":"web"}}}`), metav1.PatchOptions{})
			return err
		}},
		{"an admin makes a mirror pod", false, func() error {
			_, err := core.Pods("default").Create(ctx, pod("fake-static", "b", mirror), metav1.CreateOptions{})
			return err
		}},
		{"delete own mirror pod", true, func() error { return pods.Delete(ctx, "static-a", metav1.DeleteOptions{}) }},
		{"delete other node's pod", false, func() error { return pods.Delete(ctx, "pb", metav1.DeleteOptions{}) }},
		{"bind a pod", false, func() error {
			return a.CoreV1().RESTClient().Post().Namespace("default").Resource("pods").Name("unbound").SubResource("binding").
				Body(&corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: "unbound"}, Target: corev1.ObjectReference{Kind: "Node", Name: "a"}}).Do(ctx).Error()
		}},
		{"get secret own pod references", true, func() error { _, err := a.CoreV1().Secrets("default").Get(ctx, "sa", metav1.GetOptions{}); return err }},
		{"get secret another node's pod references", false, func() error {
			_, err := a.CoreV1().Secrets("default").Get(ctx, "sb", metav1.GetOptions{})
			return err
		}},
		{"get unreferenced secret", false, func() error {
			_, err := a.CoreV1().Secrets("default").Get(ctx, "unused", metav1.GetOptions{})
			return err
		}},
		{"watch referenced secret by name", true, func() error {
			w, err := a.CoreV1().Secrets("default").Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=sa"})
			if err == nil {
				w.Stop()
			}
			return err
		}},
		{"list secrets", false, func() error { _, err := a.CoreV1().Secrets("default").List(ctx, metav1.ListOptions{}); return err }},
		{"create secret", false, func() error {
			_, err := a.CoreV1().Secrets("default").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "x"}}, metav1.CreateOptions{})
			return err
		}},
		{"get configmap own pod references", true, func() error {
			_, err := a.CoreV1().ConfigMaps("default").Get(ctx, "csa", metav1.GetOptions{})
			return err
		}},
		{"get configmap another node's pod references", false, func() error {
			_, err := a.CoreV1().ConfigMaps("default").Get(ctx, "csb", metav1.GetOptions{})
			return err
		}},
		{"list services", true, func() error { _, err := a.CoreV1().Services("").List(ctx, metav1.ListOptions{}); return err }},
		{"create service", false, func() error {
			_, err := a.CoreV1().Services("default").Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "s2"},
				Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}}}, metav1.CreateOptions{})
			return err
		}},
		{"list endpointslices", true, func() error { _, err := a.DiscoveryV1().EndpointSlices("").List(ctx, metav1.ListOptions{}); return err }},
		{"get namespace", true, func() error { _, err := a.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{}); return err }},
		{"delete namespace", false, func() error { return a.CoreV1().Namespaces().Delete(ctx, "default", metav1.DeleteOptions{}) }},
		{"list deployments", false, func() error { _, err := a.AppsV1().Deployments("").List(ctx, metav1.ListOptions{}); return err }},
		{"list nodes", true, func() error { _, err := nodes.List(ctx, metav1.ListOptions{}); return err }},
		{"get other node", true, func() error { _, err := nodes.Get(ctx, "b", metav1.GetOptions{}); return err }},
		{"update own node status", true, func() error {
			n := nodeA()
			n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
			_, err := nodes.UpdateStatus(ctx, n, metav1.UpdateOptions{})
			return err
		}},
		{"update other node's status", false, func() error {
			_, err := nodes.Patch(ctx, "b", types.MergePatchType, []byte(`{"status":{"phase":"Running"}}`), metav1.PatchOptions{}, "status")
			return err
		}},
		{"set own node.flotilla.dev/ label", true, func() error {
			_, err := nodes.Patch(ctx, "a", types.MergePatchType, []byte(`{"metadata":{"labels":{"node.flotilla.dev/screen":"large"}}}`), metav1.PatchOptions{})
			return err
		}},
		{"grant itself autonomy", false, func() error {
			_, err := nodes.Patch(ctx, "a", types.MergePatchType, []byte(`{"metadata":{"labels":{"node.flotilla.dev/autonomy":"true"}}}`), metav1.PatchOptions{})
			return err
		}},
		{"forge the key it renewed away from", false, func() error {
			_, err := nodes.Patch(ctx, "a", types.MergePatchType, []byte(`{"metadata":{"annotations":{"`+auth.AnnotationPreviousClientKey+`":"sha256:00"}}}`), metav1.PatchOptions{})
			return err
		}},
		{"add a label that attracts workloads", false, func() error {
			_, err := nodes.Patch(ctx, "a", types.MergePatchType, []byte(`{"metadata":{"labels":{"role":"payments"}}}`), metav1.PatchOptions{})
			return err
		}},
		{"change an admin's label", false, func() error {
			_, err := nodes.Patch(ctx, "a", types.MergePatchType, []byte(`{"metadata":{"labels":{"site":"hq"}}}`), metav1.PatchOptions{})
			return err
		}},
		{"remove an admin's taint", false, func() error {
			n := nodeA()
			n.Spec.Taints = nil
			_, err := nodes.Update(ctx, n, metav1.UpdateOptions{})
			return err
		}},
		{"add own node.flotilla.dev/ taint", true, func() error {
			n := nodeA()
			n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: "node.flotilla.dev/draining", Effect: corev1.TaintEffectNoSchedule})
			_, err := nodes.Update(ctx, n, metav1.UpdateOptions{})
			return err
		}},
		{"set own pod CIDR", false, func() error {
			_, err := nodes.Patch(ctx, "a", types.MergePatchType, []byte(`{"spec":{"podCIDR":"10.42.9.0/24"}}`), metav1.PatchOptions{})
			return err
		}},
		{"change own key annotation", false, func() error {
			_, err := nodes.Patch(ctx, "a", types.MergePatchType, []byte(`{"metadata":{"annotations":{"`+auth.AnnotationClientKey+`":"sha256:00"}}}`), metav1.PatchOptions{})
			return err
		}},
		{"label other node", false, func() error {
			_, err := nodes.Patch(ctx, "b", types.MergePatchType, []byte(`{"metadata":{"labels":{"node.flotilla.dev/x":"y"}}}`), metav1.PatchOptions{})
			return err
		}},
		{"register a node with another name", false, func() error {
			_, err := nodes.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "c"}}, metav1.CreateOptions{})
			return err
		}},
		{"delete own node", false, func() error { return nodes.Delete(ctx, "a", metav1.DeleteOptions{}) }},
		{"get own lease", true, func() error { _, err := leases.Get(ctx, "a", metav1.GetOptions{}); return err }},
		{"update own lease", true, func() error {
			l, err := leases.Get(ctx, "a", metav1.GetOptions{})
			if err != nil {
				return err
			}
			holder := "a"
			l.Spec.HolderIdentity = &holder
			_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
			return err
		}},
		{"update other node's lease", false, func() error {
			_, err := leases.Patch(ctx, "b", types.MergePatchType, []byte(`{"spec":{"holderIdentity":"a"}}`), metav1.PatchOptions{})
			return err
		}},
		{"create lease for another node", false, func() error {
			_, err := leases.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "c"}}, metav1.CreateOptions{})
			return err
		}},
		{"create event", true, func() error {
			_, err := a.CoreV1().Events("default").Create(ctx, &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "pa.1"},
				InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: "default", Name: "pa"}, Reason: "Started", Message: "started", Type: "Normal"}, metav1.CreateOptions{})
			return err
		}},
		{"list events", false, func() error { _, err := a.CoreV1().Events("").List(ctx, metav1.ListOptions{}); return err }},
		{"create event about own node", true, func() error {
			_, err := a.CoreV1().Events("default").Create(ctx, event("a.1", "default", corev1.ObjectReference{Kind: "Node", Name: "a"}), metav1.CreateOptions{})
			return err
		}},
		{"create event about another node", false, func() error {
			_, err := a.CoreV1().Events("default").Create(ctx, event("b.1", "default", corev1.ObjectReference{Kind: "Node", Name: "b"}), metav1.CreateOptions{})
			return err
		}},
		{"create event about another node's pod", false, func() error {
			_, err := a.CoreV1().Events("default").Create(ctx, event("pb.2", "default", corev1.ObjectReference{Kind: "Pod", Namespace: "default", Name: "pb"}), metav1.CreateOptions{})
			return err
		}},
		{"create event about an unbound pod", false, func() error {
			_, err := a.CoreV1().Events("default").Create(ctx, event("unbound.1", "default", corev1.ObjectReference{Kind: "Pod", Namespace: "default", Name: "unbound"}), metav1.CreateOptions{})
			return err
		}},
		{"create event about a pod that does not exist", false, func() error {
			_, err := a.CoreV1().Events("default").Create(ctx, event("ghost.1", "default", corev1.ObjectReference{Kind: "Pod", Namespace: "default", Name: "ghost"}), metav1.CreateOptions{})
			return err
		}},
		{"create event about a deployment", false, func() error {
			_, err := a.CoreV1().Events("default").Create(ctx, event("web.1", "default", corev1.ObjectReference{Kind: "Deployment", APIVersion: "apps/v1", Namespace: "default", Name: "web"}), metav1.CreateOptions{})
			return err
		}},
		{"create event about own pod relating own node", true, func() error {
			e := event("pa.2", "default", corev1.ObjectReference{Kind: "Pod", Namespace: "default", Name: "pa"})
			e.Related = &corev1.ObjectReference{Kind: "Node", Name: "a"}
			_, err := a.CoreV1().Events("default").Create(ctx, e, metav1.CreateOptions{})
			return err
		}},
		{"create event about own pod relating another node's pod", false, func() error {
			e := event("pa.3", "default", corev1.ObjectReference{Kind: "Pod", Namespace: "default", Name: "pa"})
			e.Related = &corev1.ObjectReference{Kind: "Pod", Namespace: "default", Name: "pb"}
			_, err := a.CoreV1().Events("default").Create(ctx, e, metav1.CreateOptions{})
			return err
		}},
		{"patch an event about own pod", true, func() error {
			_, err := a.CoreV1().Events("default").Patch(ctx, "pa.0", types.MergePatchType, []byte(`{"count":2}`), metav1.PatchOptions{})
			return err
		}},
		{"patch an event about another node's pod", false, func() error {
			_, err := a.CoreV1().Events("default").Patch(ctx, "pb.1", types.MergePatchType, []byte(`{"message":"all is well"}`), metav1.PatchOptions{})
			return err
		}},
		{"turn an event about own pod into one about another node's", false, func() error {
			_, err := a.CoreV1().Events("default").Patch(ctx, "pa.0", types.MergePatchType, []byte(`{"involvedObject":{"name":"pb"}}`), metav1.PatchOptions{})
			return err
		}},
		{"create mirror pod owned by its node", false, func() error {
			_, err := pods.Create(ctx, pod("static-owned", "a", mirror, func(p *corev1.Pod) {
				p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: "a", UID: "x"}}
			}), metav1.CreateOptions{})
			return err
		}},
		{"create mirror pod with a controller's label", false, func() error {
			_, err := pods.Create(ctx, pod("static-hash", "a", mirror, func(p *corev1.Pod) {
				p.Labels = map[string]string{"app": "web", "pod-template-hash": "6f7d8b9c5"}
			}), metav1.CreateOptions{})
			return err
		}},
		{"create mirror pod with a source label", false, func() error {
			_, err := pods.Create(ctx, pod("static-source", "a", mirror, func(p *corev1.Pod) {
				p.Labels = map[string]string{api.LabelSource: "flotilla-system.default"}
			}), metav1.CreateOptions{})
			return err
		}},
		{"create mirror pod with a pod-deletion-cost", false, func() error {
			_, err := pods.Create(ctx, pod("static-cost", "a", mirror, func(p *corev1.Pod) {
				p.Annotations[auth.AnnotationPodDeletionCost] = "1000"
			}), metav1.CreateOptions{})
			return err
		}},
		{"create labelled mirror pod", true, func() error {
			_, err := pods.Create(ctx, pod("static-web", "a", mirror, func(p *corev1.Pod) {
				p.Labels = map[string]string{"app": "web", "app.kubernetes.io/name": "web"}
			}), metav1.CreateOptions{})
			return err
		}},
		{"report own pod's address before it has a pod CIDR", false, func() error { return setPodIP(ctx, pods, "pa", "10.42.1.7") }},
		{"(the hub assigns the pod CIDR)", true, func() error {
			_, err := core.Nodes().Patch(ctx, "a", types.MergePatchType, []byte(`{"spec":{"podCIDR":"10.42.1.0/24","podCIDRs":["10.42.1.0/24"]}}`), metav1.PatchOptions{})
			return err
		}},
		{"report own pod's address in its pod CIDR", true, func() error { return setPodIP(ctx, pods, "pa", "10.42.1.7") }},
		{"report own pod's address outside its pod CIDR", false, func() error { return setPodIP(ctx, pods, "pa", "10.42.2.7") }},
		{"report a second address outside its pod CIDR", false, func() error { return setPodIP(ctx, pods, "pa", "10.42.1.7", "fd00::7") }},
		{"report own host-network pod's address as the node's", true, func() error { return setPodIP(ctx, pods, "pa-host", "192.0.2.10") }},
		{"report own host-network pod's address as another node's", false, func() error { return setPodIP(ctx, pods, "pa-host", "192.0.2.11") }},
		{"report own host-network pod's address in its pod CIDR", false, func() error { return setPodIP(ctx, pods, "pa-host", "10.42.1.9") }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.do()
			if tc.allowed {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if !apierrors.IsForbidden(err) {
				t.Fatalf("err = %v, want 403 Forbidden", err)
			}
			if msg := err.Error(); !strings.Contains(msg, "node rule") && !strings.Contains(msg, "node restriction") {
				t.Errorf("the refusal does not name the rule that refused: %s", msg)
			}
		})
	}
	// The refusal for another node's secret is recorded.
	entries := waitAudit(t, h, func(e audit.Entry) bool {
		return e.User == "system:node:a" && e.Resource == "secrets" && e.Name == "sb" && e.Code == http.StatusForbidden
	})
	if !strings.Contains(entries.Reason, "no pod bound to it references default/sb") {
		t.Errorf("audit reason %q does not say why", entries.Reason)
	}
}

// waitAudit waits for an audit entry matching f (the log is flushed within
// a fraction of a second).
func waitAudit(t *testing.T, h *hubtest.Hub, f func(audit.Entry) bool) audit.Entry {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		es, _ := audit.ReadFile(filepath.Join(h.DataDir, audit.FileName))
		for _, e := range es {
			if f(e) {
				return e
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no matching audit entry among %d", len(es))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestViewer(t *testing.T) {
	h := hubtest.Start(t, hubtest.Options{AllowTagImages: true})
	ctx := context.Background()
	_, err := h.Client.CoreV1().Secrets("default").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "db"}, StringData: map[string]string{"p": "x"}}, metav1.CreateOptions{})
	must(t, err)
	v := clientAs(t, h, "vera", []string{auth.GroupViewers}, time.Hour)
	if _, err := v.CoreV1().Pods("").List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("viewer cannot list pods: %v", err)
	}
	if _, err := v.CoreV1().ConfigMaps("").List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("viewer cannot list config maps: %v", err)
	}
	if _, err := v.Discovery().ServerGroups(); err != nil {
		t.Errorf("viewer cannot read discovery: %v", err)
	}
	refused := map[string]func() error{
		"get secret":   func() error { _, err := v.CoreV1().Secrets("default").Get(ctx, "db", metav1.GetOptions{}); return err },
		"list secrets": func() error { _, err := v.CoreV1().Secrets("").List(ctx, metav1.ListOptions{}); return err },
		"create configmap": func() error {
			_, err := v.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "c"}}, metav1.CreateOptions{})
			return err
		},
		"delete namespace": func() error { return v.CoreV1().Namespaces().Delete(ctx, "default", metav1.DeleteOptions{}) },
		"patch node": func() error {
			_, err := v.CoreV1().Nodes().Patch(ctx, "x", types.MergePatchType, []byte(`{}`), metav1.PatchOptions{})
			return err
		},
	}
	for name, do := range refused {
		if err := do(); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "viewer") {
			t.Errorf("%s: err = %v, want 403 naming the viewer rule", name, err)
		}
	}
	for _, want := range []struct{ verb, res string }{{"get", "secrets"}, {"list", "secrets"}, {"create", "configmaps"}, {"delete", "namespaces"}, {"patch", "nodes"}} {
		waitAudit(t, h, func(e audit.Entry) bool {
			return e.User == "vera" && e.Verb == want.verb && e.Resource == want.res && e.Code == http.StatusForbidden && e.Reason != ""
		})
	}
	// A user with no role is refused with a message that says so.
	nobody := clientAs(t, h, "nobody", nil, time.Hour)
	if _, err := nobody.CoreV1().Pods("").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "no role") {
		t.Errorf("user without role: err = %v", err)
	}
	// Admin writes are audited too.
	waitAudit(t, h, func(e audit.Entry) bool {
		return e.User == pki.AdminUser && e.Verb == "create" && e.Resource == "secrets" && e.Name == "" && e.Code == http.StatusCreated
	})
}

func TestBadCertificatesGet401(t *testing.T) {
	h := hubtest.Start(t)
	ctx := context.Background()
	other, err := pki.LoadOrCreate(t.TempDir(), pki.Options{})
	must(t, err)
	foreignCert, foreignKey := other.AdminCredentials()
	foreign := clientWith(t, h, foreignCert, foreignKey)
	_, err = foreign.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if !apierrors.IsUnauthorized(err) || !strings.Contains(err.Error(), "not signed by the hub CA") {
		t.Errorf("certificate from another CA: err = %v, want 401 saying so", err)
	}
	expiredCert, expiredKey, err := h.PKI().IssueClientCert("late", []string{auth.GroupAdmins}, time.Nanosecond)
	must(t, err)
	expired := clientWith(t, h, expiredCert, expiredKey)
	_, err = expired.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if !apierrors.IsUnauthorized(err) || !strings.Contains(err.Error(), "expired") {
		t.Errorf("expired certificate: err = %v, want 401 saying it expired", err)
	}
	waitAudit(t, h, func(e audit.Entry) bool {
		return e.Code == http.StatusUnauthorized && e.User == audit.Anonymous && strings.Contains(e.Reason, "expired")
	})
}

// TestUnauthenticatedClientsAreRateLimited: a client without credentials
// that keeps trying is answered 429 with Retry-After.
func TestUnauthenticatedClientsAreRateLimited(t *testing.T) {
	h := hubtest.Start(t)
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	var limited *http.Response
	for i := 0; i < 200 && limited == nil; i++ {
		resp, err := hc.Get(h.URL() + "/api/v1/secrets")
		must(t, err)
		resp.Body.Close()
		switch resp.StatusCode {
		case http.StatusUnauthorized:
		case http.StatusTooManyRequests:
			limited = resp
		default:
			t.Fatalf("unauthenticated request answered %d", resp.StatusCode)
		}
	}
	if limited == nil {
		t.Fatal("200 unauthenticated requests were never rate-limited")
	}
	if limited.Header.Get("Retry-After") == "" {
		t.Error("429 without Retry-After")
	}
	// Authenticated clients are not affected by that address's limit.
	if _, err := h.Client.CoreV1().Namespaces().List(context.Background(), metav1.ListOptions{}); err != nil {
		t.Errorf("admin refused after the flood: %v", err)
	}
	waitAudit(t, h, func(e audit.Entry) bool { return e.Code == http.StatusTooManyRequests })
}

// TestSuccessfulPublicRequestsAreFree: requests without a certificate
// that succeed (joins from devices behind one NAT, the CA download,
// webhooks) spend nothing of their address's budget; failures do.
func TestSuccessfulPublicRequestsAreFree(t *testing.T) {
	h := hubtest.Start(t, hubtest.Options{Limits: apiserver.Limits{FailureRate: 0.01, FailureBurst: 5}})
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	get := func(path string) int {
		t.Helper()
		resp, err := hc.Get(h.URL() + path)
		must(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	for i := range 50 {
		if code := get("/join/v1/ca"); code != http.StatusOK {
			t.Fatalf("CA download %d answered %d", i, code)
		}
	}
	var codes []int
	for range 7 {
		codes = append(codes, get("/api/v1/secrets"))
	}
	if !slices.Equal(codes[:5], []int{401, 401, 401, 401, 401}) || codes[6] != http.StatusTooManyRequests {
		t.Errorf("failed requests after 50 successful ones answered %v, want 5 × 401 then 429", codes)
	}
	// The address is now limited, for successes too.
	if code := get("/join/v1/ca"); code != http.StatusTooManyRequests {
		t.Errorf("a limited address's CA download answered %d, want 429", code)
	}
}

// TestAuthenticatedClientsHaveAShare: a device or viewer that sends more
// than its rate is answered 429 with Retry-After; other clients and the
// administrators are not.
func TestAuthenticatedClientsHaveAShare(t *testing.T) {
	h := hubtest.Start(t, hubtest.Options{Limits: apiserver.Limits{UserRate: 0.01, UserBurst: 10}})
	raw := func(user string, groups []string) *http.Client {
		certPEM, keyPEM, err := h.PKI().IssueClientCert(user, groups, time.Hour)
		must(t, err)
		pair, err := tls.X509KeyPair(certPEM, keyPEM)
		must(t, err)
		return &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true, Certificates: []tls.Certificate{pair}}}}
	}
	get := func(c *http.Client) *http.Response {
		t.Helper()
		resp, err := c.Get(h.URL() + "/api/v1/namespaces")
		must(t, err)
		resp.Body.Close()
		return resp
	}
	greedy := raw("greedy", []string{auth.GroupViewers})
	for i := range 10 {
		if resp := get(greedy); resp.StatusCode != http.StatusOK {
			t.Fatalf("request %d within the burst answered %s", i, resp.Status)
		}
	}
	resp := get(greedy)
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("request past the burst answered %s (Retry-After %q), want 429 with Retry-After", resp.Status, resp.Header.Get("Retry-After"))
	}
	if resp := get(raw("modest", []string{auth.GroupViewers})); resp.StatusCode != http.StatusOK {
		t.Errorf("another viewer answered %s", resp.Status)
	}
	for range 20 {
		if _, err := h.Client.CoreV1().Namespaces().List(context.Background(), metav1.ListOptions{}); err != nil {
			t.Fatalf("the admin: %v", err)
		}
	}
}

// TestSecretWatchEndsWithThePod: a device's watch of a Secret stops
// delivering once no pod bound to the device uses it; a new watch is
// refused.
func TestSecretWatchEndsWithThePod(t *testing.T) {
	h := hubtest.Start(t, hubtest.Options{AllowTagImages: true})
	ctx := context.Background()
	core := h.Client.CoreV1()
	_, err := core.Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "a"}}, metav1.CreateOptions{})
	must(t, err)
	_, err = core.Secrets("default").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "db"}, StringData: map[string]string{"k": "v1"}}, metav1.CreateOptions{})
	must(t, err)
	_, err = core.ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cdb"}}, metav1.CreateOptions{})
	must(t, err)
	_, err = core.Pods("default").Create(ctx, pod("app", "a", usesSecretAndConfigMap("db", "cdb")), metav1.CreateOptions{})
	must(t, err)

	dev := h.NodeClient("a")
	w, err := dev.CoreV1().Secrets("default").Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=db"})
	must(t, err)
	defer w.Stop()
	next := func() (watch.Event, bool) {
		select {
		case ev, ok := <-w.ResultChan():
			return ev, ok
		case <-time.After(10 * time.Second):
			t.Fatal("no event and no end of the watch within 10s")
			return watch.Event{}, false
		}
	}
	if ev, ok := next(); !ok || ev.Type != watch.Added {
		t.Fatalf("first event %v %v, want the Secret ADDED", ev.Type, ok)
	}
	update := func(v string) {
		t.Helper()
		s, err := core.Secrets("default").Get(ctx, "db", metav1.GetOptions{})
		must(t, err)
		s.Data = map[string][]byte{"k": []byte(v)}
		_, err = core.Secrets("default").Update(ctx, s, metav1.UpdateOptions{})
		must(t, err)
	}
	update("v2")
	if ev, ok := next(); !ok || ev.Type != watch.Modified {
		t.Fatalf("while the pod uses it: %v %v, want MODIFIED", ev.Type, ok)
	}

	// The pod goes; the Secret changes again.
	must(t, core.Pods("default").Delete(ctx, "app", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}))
	poll(t, "the pod gone", func(ctx context.Context) (bool, error) {
		_, err := core.Pods("default").Get(ctx, "app", metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	update("v3-after-the-pod")
	if ev, ok := next(); ok {
		s, _ := ev.Object.(*corev1.Secret)
		if s != nil && string(s.Data["k"]) == "v3-after-the-pod" {
			t.Fatal("the device was sent the Secret after its pod was gone")
		}
		t.Fatalf("after the pod was gone: %v, want the watch to end", ev.Type)
	}
	if _, err := dev.CoreV1().Secrets("default").Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=db"}); !apierrors.IsForbidden(err) {
		t.Errorf("a new watch after the pod was gone: err = %v, want 403", err)
	}
}
