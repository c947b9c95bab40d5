package apiserver

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"flotilla.dev/flotilla/api"
	"flotilla.dev/flotilla/api/defaults"
)

// BenchmarkRecordManagedFields measures what recording managedFields adds
// to a pod's create and to an update of it that changes one label.
func BenchmarkRecordManagedFields(b *testing.B) {
	f := newFieldManagers(nil)
	res, _ := api.ResourceForKind(corev1.SchemeGroupVersion.WithKind("Pod"))
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default", Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.local/app:1",
			Ports: []corev1.ContainerPort{{ContainerPort: 8080}}, Env: []corev1.EnvVar{{Name: "SHOP", Value: "0042"}}}}},
	}
	pod.SetGroupVersionKind(res.GVK())
	defaults.Default(pod)
	o := owner{manager: "bench", track: true}
	if _, err := f.get(res, ""); err != nil {
		b.Fatal(err)
	}
	b.Run("create", func(b *testing.B) {
		for b.Loop() {
			f.record(res, "", nil, pod.DeepCopy(), o)
		}
	})
	live := f.record(res, "", nil, pod.DeepCopy(), o).(*corev1.Pod)
	if len(live.ManagedFields) != 1 {
		b.Fatalf("managedFields after create: %v", live.ManagedFields)
	}
	b.Run("update", func(b *testing.B) {
		for b.Loop() {
			next := live.DeepCopy()
			next.Labels["round"] = "1"
			f.record(res, "", live, next, o)
		}
	})
}
