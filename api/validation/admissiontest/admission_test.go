package admissiontest

import (
	"context"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"flotilla.dev/flotilla/hub/hubtest"
)

const image = "registry.local/shop/app@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

// causes returns the fields a 422 names.
func causes(t *testing.T, err error) map[string]metav1.CauseType {
	t.Helper()
	if !apierrors.IsInvalid(err) {
		t.Fatalf("want a 422 Invalid, got %v", err)
	}
	out := map[string]metav1.CauseType{}
	for _, c := range err.(apierrors.APIStatus).Status().Details.Causes {
		out[c.Field] = c.Type
	}
	return out
}

func TestHubDefaultsWhatItStores(t *testing.T) {
	h := hubtest.Start(t)
	c := ctx(t)
	p, err := h.Client.CoreV1().Pods("default").Create(c, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: image, Ports: []corev1.ContainerPort{{ContainerPort: 80}}}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s := p.Spec
	if s.RestartPolicy != corev1.RestartPolicyAlways || s.DNSPolicy != corev1.DNSClusterFirst || *s.TerminationGracePeriodSeconds != 30 ||
		s.SchedulerName != corev1.DefaultSchedulerName || s.Containers[0].Ports[0].Protocol != corev1.ProtocolTCP ||
		s.Containers[0].ImagePullPolicy != corev1.PullIfNotPresent || len(s.Tolerations) != 2 {
		t.Errorf("pod not defaulted as Kubernetes does: %+v", s)
	}

	d, err := h.Client.AppsV1().Deployments("default").Create(c, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: image}}},
			},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if *d.Spec.Replicas != 1 || *d.Spec.RevisionHistoryLimit != 10 || *d.Spec.ProgressDeadlineSeconds != 600 ||
		d.Spec.Strategy.RollingUpdate == nil || d.Spec.Strategy.RollingUpdate.MaxSurge.String() != "25%" {
		t.Errorf("deployment not defaulted: %+v", d.Spec)
	}
}

func TestHubRefusesForbiddenPodUpdates(t *testing.T) {
	h := hubtest.Start(t)
	c := ctx(t)
	pods := h.Client.CoreV1().Pods("default")
	p, err := pods.Create(c, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: image, Ports: []corev1.ContainerPort{{ContainerPort: 80}}}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	changed := p.DeepCopy()
	changed.Spec.Containers[0].Ports[0].ContainerPort = 8080
	_, err = pods.Update(c, changed, metav1.UpdateOptions{})
	if got := causes(t, err); got["spec"] != metav1.CauseTypeForbidden {
		t.Errorf("causes %v, want spec Forbidden", got)
	}
	if !strings.Contains(err.Error(), "pod updates may not change fields other than") || !strings.Contains(err.Error(), "containerPort: 80 -> 8080") {
		t.Errorf("message does not explain the refusal: %v", err)
	}

	relabel := p.DeepCopy()
	relabel.Labels = map[string]string{"tier": "front"}
	relabel.Spec.Containers[0].Image = strings.Replace(image, "0123", "4567", 1)
	if _, err := pods.Update(c, relabel, metav1.UpdateOptions{}); err != nil {
		t.Errorf("labels and image may change: %v", err)
	}

	tagged := p.DeepCopy()
	tagged.ResourceVersion = ""
	tagged.Spec.Containers[0].Image = "registry.local/shop/app:2"
	_, err = pods.Update(c, tagged, metav1.UpdateOptions{})
	if got := causes(t, err); got["spec.containers[0].image"] != metav1.CauseTypeFieldValueInvalid {
		t.Errorf("causes %v, want spec.containers[0].image Invalid", got)
	}
}

func TestHubKeepsAllocatedClusterIPOnPut(t *testing.T) {
	h := hubtest.Start(t)
	c := ctx(t)
	svcs := h.Client.CoreV1().Services("default")
	manifest := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": "web"},
			Ports:    []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}},
		},
	}
	created, err := svcs.Create(c, manifest.DeepCopy(), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The hub allocates the address on create.
	ip := created.Spec.ClusterIP
	if ip == "" {
		t.Fatalf("the hub allocated no cluster IP: %+v", created.Spec)
	}
	// The manifest from Git again, as an unconditional PUT: no clusterIP.
	again := manifest.DeepCopy()
	again.Spec.Ports[0].TargetPort = intstr.FromInt32(9090)
	updated, err := svcs.Update(c, again, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("PUT of the manifest without clusterIP: %v", err)
	}
	if updated.Spec.ClusterIP != ip {
		t.Errorf("clusterIP %q after PUT, want the allocated %q", updated.Spec.ClusterIP, ip)
	}
	moved := updated.DeepCopy()
	moved.Spec.ClusterIP, moved.Spec.ClusterIPs = "10.43.200.200", nil
	_, err = svcs.Update(c, moved, metav1.UpdateOptions{})
	if got := causes(t, err); got["spec.clusterIP"] != metav1.CauseTypeFieldValueInvalid {
		t.Errorf("causes %v, want spec.clusterIP Invalid (immutable)", got)
	}
}
