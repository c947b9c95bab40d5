package admissiontest

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"flotilla.dev/flotilla/api"
	"flotilla.dev/flotilla/hub/hubtest"
)

type warnings struct {
	mu   sync.Mutex
	seen []string
}

func (w *warnings) HandleWarningHeaderWithContext(_ context.Context, code int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.seen = append(w.seen, text)
}

func (w *warnings) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.seen
	w.seen = nil
	return out
}

func podWith(name string, mutate func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: image}}}}
	if mutate != nil {
		mutate(p)
	}
	return p
}

func privileged(p *corev1.Pod) {
	p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: ptr.To(true)}
}

func hostPath(p *corev1.Pod) {
	p.Spec.Volumes = []corev1.Volume{{Name: "etc", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/etc"}}}}
}

func hostNetwork(p *corev1.Pod) { p.Spec.HostNetwork = true }

// restricted is a pod the restricted level admits.
func restricted(p *corev1.Pod) {
	p.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true),
		SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}}
	p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false),
		Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}
}

// TestPodSecurity: the hub enforces the Pod Security Standards on pods by
// namespace (baseline unless the namespace's label says otherwise;
// flotilla-system privileged), refuses with Kubernetes' words, and warns
// about pod templates it would refuse the pods of.
func TestPodSecurity(t *testing.T) {
	h := hubtest.Start(t, hubtest.Options{RestrictDefaultNamespace: true})
	c := ctx(t)
	w := &warnings{}
	cfg := rest.CopyConfig(h.Config)
	cfg.WarningHandlerWithContext = w
	client := kubernetes.NewForConfigOrDie(cfg)
	core := client.CoreV1()
	for name, level := range map[string]string{"shop": "", "edge": "privileged", "strict": "restricted"} {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if level != "" {
			ns.Labels = map[string]string{"pod-security.kubernetes.io/enforce": level}
		}
		if _, err := core.Namespaces().Create(c, ns, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	cases := []struct {
		ns, name string
		mutate   func(*corev1.Pod)
		refusal  string // "" for admitted
	}{
		{"default", "plain", nil, ""},
		{"default", "priv", privileged, `pods "priv" is forbidden: violates PodSecurity "baseline:latest": privileged (container "c" must not set securityContext.privileged=true)`},
		{"default", "hostnet", hostNetwork, `pods "hostnet" is forbidden: violates PodSecurity "baseline:latest": host namespaces (hostNetwork=true)`},
		{"shop", "hostpath", hostPath, `pods "hostpath" is forbidden: violates PodSecurity "baseline:latest": hostPath volumes (volume "etc")`},
		{"shop", "hostport", func(p *corev1.Pod) {
			p.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 80, HostPort: 8080}}
		}, `violates PodSecurity "baseline:latest": hostPort (container "c" uses hostPort 8080)`},
		{"shop", "caps", func(p *corev1.Pod) {
			p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"NET_ADMIN"}}}
		}, `non-default capabilities (container "c" must not include "NET_ADMIN" in securityContext.capabilities.add)`},
		{api.NamespaceSystem, "hostnet", func(p *corev1.Pod) { hostNetwork(p); hostPath(p); privileged(p) }, ""},
		{"edge", "hostnet", func(p *corev1.Pod) { hostNetwork(p); hostPath(p) }, ""},
		{"strict", "plain", nil, `pods "plain" is forbidden: violates PodSecurity "restricted:latest": allowPrivilegeEscalation != false`},
		{"strict", "good", restricted, ""},
	}
	for _, tc := range cases {
		_, err := core.Pods(tc.ns).Create(c, podWith(tc.name, tc.mutate), metav1.CreateOptions{})
		switch {
		case tc.refusal == "" && err != nil:
			t.Errorf("%s/%s refused: %v", tc.ns, tc.name, err)
		case tc.refusal != "" && !apierrors.IsForbidden(err):
			t.Errorf("%s/%s: err = %v, want 403 Forbidden", tc.ns, tc.name, err)
		case tc.refusal != "" && !strings.Contains(err.Error(), tc.refusal):
			t.Errorf("%s/%s: refusal %q, want it to say %q", tc.ns, tc.name, err.Error(), tc.refusal)
		}
	}

	// A pod admitted before its namespace was tightened: changing its
	// labels is fine, a new image is checked against the new level.
	w.take()
	tighten := []byte(`{"metadata":{"labels":{"pod-security.kubernetes.io/enforce":"baseline"}}}`)
	if _, err := core.Namespaces().Patch(c, "edge", types.MergePatchType, tighten, metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
		t.Fatal(err)
	}
	want := []string{`existing pods in namespace "edge" violate the new PodSecurity enforce level "baseline:latest"`,
		`hostnet: host namespaces (hostNetwork=true), hostPath volumes (volume "etc")`}
	if got := w.take(); !slices.Equal(got, want) {
		t.Errorf("a dry run of tightening a namespace warned %q, want %q", got, want)
	}
	if ns, _ := core.Namespaces().Get(c, "edge", metav1.GetOptions{}); ns.Labels["pod-security.kubernetes.io/enforce"] != "privileged" {
		t.Errorf("the dry run changed the namespace: %v", ns.Labels)
	}
	if _, err := core.Namespaces().Patch(c, "edge", types.MergePatchType, tighten, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := core.Pods("edge").Patch(c, "hostnet", types.MergePatchType, []byte(`{"metadata":{"labels":{"tier":"edge"}}}`), metav1.PatchOptions{}); err != nil {
		t.Errorf("relabelling a pod admitted under the old level: %v", err)
	}
	newImage := strings.Replace(image, "0123", "4567", 1)
	_, err := core.Pods("edge").Patch(c, "hostnet", types.StrategicMergePatchType, []byte(`{"spec":{"containers":[{"name":"c","image":"`+newImage+`"}]}}`), metav1.PatchOptions{})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `violates PodSecurity "baseline:latest"`) {
		t.Errorf("a new image for a pod the namespace's level refuses: err = %v, want 403", err)
	}

	// A label that names no level is refused, as Kubernetes does.
	_, err = core.Namespaces().Create(c, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "typo",
		Labels: map[string]string{"pod-security.kubernetes.io/enforce": "strict"}}}, metav1.CreateOptions{})
	if !apierrors.IsInvalid(err) {
		t.Errorf("namespace with enforce=strict: err = %v, want 422", err)
	}
	_, err = core.Namespaces().Patch(c, "shop", types.MergePatchType, []byte(`{"metadata":{"labels":{"pod-security.kubernetes.io/enforce":"none"}}}`), metav1.PatchOptions{})
	if !apierrors.IsInvalid(err) {
		t.Errorf("labelling a namespace enforce=none: err = %v, want 422", err)
	}

	// Templates: admitted, with a warning; their pods are what is refused.
	w.take()
	labels := map[string]string{"app": "agentish"}
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "agentish"},
		Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: podWith("", func(p *corev1.Pod) { hostNetwork(p); privileged(p) }).Spec}}}
	if _, err := client.AppsV1().Deployments("shop").Create(c, d, metav1.CreateOptions{}); err != nil {
		t.Fatalf("a Deployment whose pods the namespace refuses must still be admitted: %v", err)
	}
	got := strings.Join(w.take(), "\n")
	if !strings.Contains(got, `would violate PodSecurity "baseline:latest": host namespaces (hostNetwork=true), privileged (container "c" must not set securityContext.privileged=true)`) {
		t.Errorf("warnings %q, want one naming the violations", got)
	}
	if _, err := client.AppsV1().DaemonSets(api.NamespaceSystem).Create(c, &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "agentish"},
		Spec: appsv1.DaemonSetSpec{Selector: d.Spec.Selector, Template: d.Spec.Template}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := w.take(); len(got) != 0 {
		t.Errorf("a DaemonSet in the privileged %s got warnings %q", api.NamespaceSystem, got)
	}

	// Mirror pods record what a device runs: not refused (the device runs
	// the static pod anyway).
	dev := h.NodeClient("dev-1")
	if _, err := dev.CoreV1().Nodes().Create(c, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "dev-1"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	mirror := podWith("proxy-dev-1", func(p *corev1.Pod) {
		hostNetwork(p)
		p.Spec.NodeName = "dev-1"
		p.Annotations = map[string]string{api.AnnotationMirrorPod: "hash"}
	})
	if _, err := dev.CoreV1().Pods("default").Create(c, mirror, metav1.CreateOptions{}); err != nil {
		t.Errorf("a device's host-network mirror pod: %v", err)
	}
}
