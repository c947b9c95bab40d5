package apiserver_test

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"flotilla.dev/flotilla/hub/hubtest"
)

func TestPriorityAdmission(t *testing.T) {
	h := hubtest.Start(t)
	c, cs := ctx(t), h.Client
	pcs := cs.SchedulingV1().PriorityClasses()

	sys, err := pcs.Get(c, "system-node-critical", metav1.GetOptions{})
	if err != nil || sys.Value != 2000001000 {
		t.Fatalf("built-in system-node-critical: %v %+v", err, sys)
	}
	if _, err := pcs.Get(c, "system-cluster-critical", metav1.GetOptions{}); err != nil {
		t.Fatalf("built-in system-cluster-critical: %v", err)
	}

	// No class named, no default: priority 0, as Kubernetes.
	plain, err := cs.CoreV1().Pods("default").Create(c, pod("plain", nil), metav1.CreateOptions{})
	if err != nil || plain.Spec.Priority == nil || *plain.Spec.Priority != 0 || plain.Spec.PriorityClassName != "" {
		t.Fatalf("pod without class: %v priority=%v class=%q", err, plain.Spec.Priority, plain.Spec.PriorityClassName)
	}

	p := pod("critical", nil)
	p.Spec.PriorityClassName = "system-cluster-critical"
	got, err := cs.CoreV1().Pods("default").Create(c, p, metav1.CreateOptions{})
	if err != nil || *got.Spec.Priority != 2000000000 || got.Spec.PreemptionPolicy == nil || *got.Spec.PreemptionPolicy != corev1.PreemptLowerPriority {
		t.Fatalf("pod of system-cluster-critical: %v priority=%v policy=%v", err, got.Spec.Priority, got.Spec.PreemptionPolicy)
	}
	// A client that sends the pod back without the resolved fields keeps them.
	got.Spec.Priority, got.Spec.PreemptionPolicy = nil, nil
	got.Labels = map[string]string{"touched": "yes"}
	upd, err := cs.CoreV1().Pods("default").Update(c, got, metav1.UpdateOptions{})
	if err != nil || upd.Spec.Priority == nil || *upd.Spec.Priority != 2000000000 {
		t.Fatalf("update without priority: %v %v", err, upd)
	}

	p = pod("unknown", nil)
	p.Spec.PriorityClassName = "gold"
	_, err = cs.CoreV1().Pods("default").Create(c, p, metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `pods "unknown" is forbidden: no PriorityClass with name gold was found`) {
		t.Fatalf("unknown class: want 403 naming it, got %v", err)
	}

	never := corev1.PreemptNever
	if _, err := pcs.Create(c, &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: "gold"}, Value: 1000,
		GlobalDefault: true, PreemptionPolicy: &never}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create gold: %v", err)
	}
	// At once: the class is found though the watch cache may lag.
	got, err = cs.CoreV1().Pods("default").Create(c, p, metav1.CreateOptions{})
	if err != nil || *got.Spec.Priority != 1000 || *got.Spec.PreemptionPolicy != corev1.PreemptNever {
		t.Fatalf("pod of gold: %v %+v", err, got.Spec)
	}
	waitFor(t, func() bool {
		q, err := cs.CoreV1().Pods("default").Create(c, pod("defaulted", nil), metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("pod without class: %v", err)
		}
		_ = cs.CoreV1().Pods("default").Delete(c, "defaulted", metav1.DeleteOptions{})
		return q.Spec.PriorityClassName == "gold" && *q.Spec.Priority == 1000
	})

	p = pod("liar", nil)
	p.Spec.PriorityClassName = "gold"
	p.Spec.Priority = new(int32(5))
	_, err = cs.CoreV1().Pods("default").Create(c, p, metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "the integer value of priority (5) must not be provided in pod spec; priority admission controller computed 1000 from the given PriorityClass name") {
		t.Fatalf("priority differing from the class: %v", err)
	}

	_, err = pcs.Create(c, &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: "silver"}, Value: 10, GlobalDefault: true}, metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "PriorityClass gold is already marked as default. Only one default can exist") {
		t.Fatalf("second default: %v", err)
	}
	_, err = pcs.Create(c, &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: "system-mine"}, Value: 10}, metav1.CreateOptions{})
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "reserved for system use only") {
		t.Fatalf("system- name: %v", err)
	}
	_, err = pcs.Create(c, &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: "huge"}, Value: 1000000001}, metav1.CreateOptions{})
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "maximum allowed value of a user defined priority is 1000000000") {
		t.Fatalf("value above a billion: %v", err)
	}
	gold, _ := pcs.Get(c, "gold", metav1.GetOptions{})
	gold.Value = 7
	if _, err := pcs.Update(c, gold, metav1.UpdateOptions{}); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "value: Forbidden: may not be changed in an update") {
		t.Fatalf("changing the value: %v", err)
	}
}
