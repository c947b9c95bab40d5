package apiserver

import (
	"testing"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

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

// BenchmarkRecordLease measures recording managedFields for a Lease
// renewal: its holder changing only spec.renewTime, which it owns.
func BenchmarkRecordLease(b *testing.B) {
	f := newFieldManagers(nil)
	res, _ := api.ResourceForKind(coordv1.SchemeGroupVersion.WithKind("Lease"))
	now := metav1.NewMicroTime(time.Now())
	l := &coordv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "d", Namespace: "kube-node-lease", UID: "u", ResourceVersion: "5", Generation: 1},
		Spec: coordv1.LeaseSpec{HolderIdentity: ptr.To("d"), LeaseDurationSeconds: ptr.To(int32(40)), RenewTime: &now}}
	l.SetGroupVersionKind(res.GVK())
	o := owner{manager: "fleetsim", track: true}
	live := f.record(res, "", nil, l.DeepCopy(), o).(*coordv1.Lease)
	b.ReportAllocs()
	for b.Loop() {
		next := live.DeepCopy()
		t := metav1.NewMicroTime(time.Now())
		next.Spec.RenewTime = &t
		f.record(res, "", live, next, o)
	}
}
