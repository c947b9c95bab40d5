package apiserver_test

import (
	"context"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"flotilla.dev/flotilla/hub/hubtest"
)

// TestScaleOverProtobuf: client-go's typed GetScale and UpdateScale, with
// the protobuf bodies generated clients send by default, on every scale
// subresource (before, the hub answered 400 "no kind Scale is registered").
func TestScaleOverProtobuf(t *testing.T) {
	h := hubtest.Start(t)
	ctx := context.Background()
	cfg := rest.CopyConfig(h.Config)
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	cs := kubernetes.NewForConfigOrDie(cfg)
	labels := map[string]string{"app": "web"}
	tmpl := corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: testImage}}}}
	sel := &metav1.LabelSelector{MatchLabels: labels}
	if _, err := h.Client.AppsV1().Deployments("default").Create(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: appsv1.DeploymentSpec{Replicas: ptr(int32(1)), Selector: sel, Template: tmpl}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Client.AppsV1().ReplicaSets("default").Create(ctx, &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: "rs"},
		Spec: appsv1.ReplicaSetSpec{Replicas: ptr(int32(1)), Selector: sel, Template: tmpl}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		get    func() (*autoscalingv1.Scale, error)
		update func(*autoscalingv1.Scale) (*autoscalingv1.Scale, error)
		spec   func() int32
	}{
		{"deployments",
			func() (*autoscalingv1.Scale, error) {
				return cs.AppsV1().Deployments("default").GetScale(ctx, "web", metav1.GetOptions{})
			},
			func(s *autoscalingv1.Scale) (*autoscalingv1.Scale, error) {
				return cs.AppsV1().Deployments("default").UpdateScale(ctx, "web", s, metav1.UpdateOptions{})
			},
			func() int32 {
				d, _ := h.Client.AppsV1().Deployments("default").Get(ctx, "web", metav1.GetOptions{})
				return *d.Spec.Replicas
			}},
		{"replicasets",
			func() (*autoscalingv1.Scale, error) {
				return cs.AppsV1().ReplicaSets("default").GetScale(ctx, "rs", metav1.GetOptions{})
			},
			func(s *autoscalingv1.Scale) (*autoscalingv1.Scale, error) {
				return cs.AppsV1().ReplicaSets("default").UpdateScale(ctx, "rs", s, metav1.UpdateOptions{})
			},
			func() int32 {
				r, _ := h.Client.AppsV1().ReplicaSets("default").Get(ctx, "rs", metav1.GetOptions{})
				return *r.Spec.Replicas
			}},
	} {
		s, err := tc.get()
		if err != nil {
			t.Fatalf("%s: GetScale: %v", tc.name, err)
		}
		s.Spec.Replicas = 4
		out, err := tc.update(s)
		if err != nil {
			t.Fatalf("%s: UpdateScale over protobuf: %v", tc.name, err)
		}
		if out.Spec.Replicas != 4 || tc.spec() != 4 {
			t.Errorf("%s: scaled to %d, spec.replicas %d; want 4", tc.name, out.Spec.Replicas, tc.spec())
		}
	}
}
