package validation

import (
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"flotilla.dev/flotilla/api"
)

func nsWith(name string, labels map[string]string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
}

func TestPodSecurityLevels(t *testing.T) {
	priv := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: corev1.PodSpec{HostNetwork: true,
		Containers: []corev1.Container{{Name: "c", SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(true)}}}}}
	plain := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c"}}}}
	p := DefaultPodSecurity()
	cases := []struct {
		ns          *corev1.Namespace
		pod         *corev1.Pod
		level, want string // want "" for admitted
	}{
		{nsWith("default", nil), plain, "baseline:latest", ""},
		{nsWith("default", nil), priv, "baseline:latest", `violates PodSecurity "baseline:latest": host namespaces (hostNetwork=true), privileged (container "c" must not set securityContext.privileged=true)`},
		{nsWith(api.NamespaceSystem, nil), priv, "privileged:latest", ""},
		{nsWith(api.NamespaceSystem, map[string]string{LabelPodSecurityEnforce: "baseline"}), priv, "baseline:latest", "privileged"},
		{nsWith("edge", map[string]string{LabelPodSecurityEnforce: "privileged"}), priv, "privileged:latest", ""},
		{nsWith("pci", map[string]string{LabelPodSecurityEnforce: "restricted"}), plain, "restricted:latest", `violates PodSecurity "restricted:latest": allowPrivilegeEscalation != false`},
		// A label that names no level fails closed.
		{nsWith("typo", map[string]string{LabelPodSecurityEnforce: "strict"}), plain, "restricted:latest", "restricted"},
	}
	for _, tc := range cases {
		if got := p.Level(tc.ns); got != tc.level {
			t.Errorf("%s %v: level %s, want %s", tc.ns.Name, tc.ns.Labels, got, tc.level)
		}
		err := p.CheckPod(tc.ns, tc.pod, nil)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s %v: refused: %v", tc.ns.Name, tc.ns.Labels, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s %v: err = %v, want it to say %q", tc.ns.Name, tc.ns.Labels, err, tc.want)
		}
	}
	// The hub's own level for a namespace (its setting) counts where the
	// namespace has no label.
	strict := PodSecurity{Default: PodSecurityRestricted}
	if err := strict.CheckPod(nsWith("default", nil), plain, nil); err == nil {
		t.Error("a hub whose default is restricted admitted a pod that is not")
	}
	if err := (PodSecurity{Default: "strict"}).Validate(); err == nil {
		t.Error("a default level that is none of the three was accepted")
	}

	// Updates are checked only when images or containers change.
	old := plain.DeepCopy()
	bad := priv.DeepCopy() // (validation refuses such a spec change anyway)
	if err := p.CheckPod(nsWith("default", nil), bad, bad.DeepCopy()); err != nil {
		t.Errorf("an update that changes nothing the policy looks at was refused: %v", err)
	}
	newImage := old.DeepCopy()
	newImage.Spec.HostNetwork = true
	newImage.Spec.Containers[0].Image = "other"
	if err := p.CheckPod(nsWith("default", nil), newImage, old); err == nil {
		t.Error("an update to a new image of a pod the level refuses was admitted")
	}

	// Mirror pods are the device's record, never refused.
	m := priv.DeepCopy()
	m.Annotations = map[string]string{api.AnnotationMirrorPod: "h"}
	if err := p.CheckPod(nsWith("default", nil), m, nil); err != nil {
		t.Errorf("mirror pod refused: %v", err)
	}
}

func TestPodSecurityTemplateWarnings(t *testing.T) {
	p := DefaultPodSecurity()
	d := &appsv1.Deployment{Spec: appsv1.DeploymentSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
		Volumes:    []corev1.Volume{{Name: "v", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}}},
		Containers: []corev1.Container{{Name: "c"}}}}}}
	got := p.TemplateWarnings(nsWith("shop", nil), d)
	if len(got) != 1 || got[0] != `would violate PodSecurity "baseline:latest": hostPath volumes (volume "v")` {
		t.Errorf("warnings %q", got)
	}
	if got := p.TemplateWarnings(nsWith("edge", map[string]string{LabelPodSecurityEnforce: "privileged"}), d); len(got) != 0 {
		t.Errorf("a privileged namespace warned: %q", got)
	}
	// warn set apart from enforce.
	ns := nsWith("edge", map[string]string{LabelPodSecurityEnforce: "privileged", LabelPodSecurityWarn: "baseline"})
	if got := p.TemplateWarnings(ns, d); len(got) != 1 {
		t.Errorf("warn=baseline in a privileged namespace: warnings %q, want one", got)
	}
	if got := p.TemplateWarnings(nsWith("shop", nil), &corev1.Pod{}); len(got) != 0 {
		t.Errorf("warnings for a kind without a template: %q", got)
	}
}

func TestNamespacePodSecurityLabels(t *testing.T) {
	good := nsWith("shop", map[string]string{LabelPodSecurityEnforce: "restricted", "pod-security.kubernetes.io/enforce-version": "v1.30"})
	if errs := ValidateCreate(good, Options{}); len(errs) != 0 {
		t.Errorf("valid labels refused: %v", errs)
	}
	bad := nsWith("shop", map[string]string{LabelPodSecurityEnforce: "strict"})
	errs := ValidateCreate(bad, Options{})
	good.ResourceVersion, bad.ResourceVersion = "1", "1"
	if len(errs) != 1 || !strings.Contains(errs[0].Field, "pod-security.kubernetes.io/enforce") {
		t.Errorf("enforce=strict: errs %v, want one on the label", errs)
	}
	// A namespace whose bad label was there before may change otherwise.
	next := bad.DeepCopy()
	next.Labels["team"] = "shop"
	if errs := ValidateUpdate(next, bad, Options{}); len(errs) != 0 {
		t.Errorf("an unchanged bad label blocked another change: %v", errs)
	}
	if errs := ValidateUpdate(bad, good, Options{}); len(errs) == 0 {
		t.Error("changing the label to a bad value was accepted")
	}
}

func TestPodSecurityExistingPods(t *testing.T) {
	p := DefaultPodSecurity()
	hostNet := func(name string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PodSpec{HostNetwork: true, Containers: []corev1.Container{{Name: "c"}}}}
	}
	mirror := hostNet("static-dev-1")
	mirror.Annotations = map[string]string{api.AnnotationMirrorPod: "h"}
	pods := []*corev1.Pod{hostNet("a"), hostNet("b"), hostNet("c"), mirror,
		{ObjectMeta: metav1.ObjectMeta{Name: "fine"}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c"}}}}}
	got := p.ExistingPodWarnings(nsWith("shop", nil), pods)
	want := []string{`existing pods in namespace "shop" violate the new PodSecurity enforce level "baseline:latest"`,
		`a (and 2 other pods): host namespaces (hostNetwork=true)`}
	if !slices.Equal(got, want) {
		t.Errorf("warnings %q, want %q", got, want)
	}
	if got := p.ExistingPodWarnings(nsWith(api.NamespaceSystem, nil), pods); len(got) != 0 {
		t.Errorf("a privileged namespace warned: %q", got)
	}
}
