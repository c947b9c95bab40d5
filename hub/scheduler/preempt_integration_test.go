package scheduler_test

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"flotilla.dev/flotilla/hub"
	"flotilla.dev/flotilla/hub/hubtest"
	"flotilla.dev/flotilla/test/simdevice"
)

// TestPreemptionOnASimulatedDevice: a device full with a low-priority pod
// (running, through the real kubelet on simdevice) makes room for a
// high-priority one: the low pod is marked DisruptionTarget, stopped and
// deleted by the device, a Preempted event names the preemptor, and the
// high pod is bound to the device; a pod that may not preempt
// (preemptionPolicy Never) waits with kube-scheduler's words.
func TestPreemptionOnASimulatedDevice(t *testing.T) {
	h := hubtest.Start(t, hubtest.Options{Loops: []hub.Loop{schedulerLoop()}})
	c := h.Client
	ctx, cancel := context.WithCancel(context.Background())
	fleet, err := simdevice.StartFleet(ctx, c, []simdevice.Config{{Name: "shop-1", Capacity: corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("1Gi"), corev1.ResourcePods: resource.MustParse("10")}}})
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
	never := corev1.PreemptNever
	for _, pc := range []*schedulingv1.PriorityClass{
		{ObjectMeta: metav1.ObjectMeta{Name: "batch"}, Value: 10},
		{ObjectMeta: metav1.ObjectMeta{Name: "checkout"}, Value: 1000},
		{ObjectMeta: metav1.ObjectMeta{Name: "patient"}, Value: 500, PreemptionPolicy: &never},
	} {
		if _, err := c.SchedulingV1().PriorityClasses().Create(ctx, pc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	withClass := func(class string) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			p.Spec.PriorityClassName = class
			grace := int64(1)
			p.Spec.TerminationGracePeriodSeconds = &grace
		}
	}
	createPod(t, c, "report", "768Mi", withClass("batch"))
	var lowUID string
	waitFor(t, "the low-priority pod running on the device", func(ctx context.Context) (bool, error) {
		p, err := c.CoreV1().Pods("default").Get(ctx, "report", metav1.GetOptions{})
		lowUID = string(p.UID)
		return err == nil && p.Spec.NodeName == "shop-1" && p.Status.Phase == corev1.PodRunning, err
	})

	createPod(t, c, "waiting", "768Mi", withClass("patient"))
	waitFor(t, "the Never pod told it may not preempt", func(ctx context.Context) (bool, error) {
		p, err := c.CoreV1().Pods("default").Get(ctx, "waiting", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		cond := scheduledCondition(p)
		return cond != nil && cond.Message == "0/1 nodes are available: 1 Insufficient memory. preemption: not eligible due to preemptionPolicy=Never.", nil
	})

	createPod(t, c, "till", "768Mi", withClass("checkout"))
	var highUID string
	waitFor(t, "the high-priority pod bound to the device", func(ctx context.Context) (bool, error) {
		p, err := c.CoreV1().Pods("default").Get(ctx, "till", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		highUID = string(p.UID)
		return p.Spec.NodeName == "shop-1" && p.Status.NominatedNodeName == "shop-1", nil
	})
	if _, err := c.CoreV1().Pods("default").Get(ctx, "report", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the victim is still there: %v", err)
	}
	evs, err := c.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("involvedObject.name", "report").String()})
	if err != nil {
		t.Fatal(err)
	}
	var preempted bool
	for _, e := range evs.Items {
		if e.Reason == "Preempted" && string(e.InvolvedObject.UID) == lowUID {
			preempted = e.Type == corev1.EventTypeNormal && e.Message == "Preempted by pod "+highUID+" on node shop-1"
		}
	}
	if !preempted {
		var got []string
		for _, e := range evs.Items {
			got = append(got, e.Reason+": "+e.Message)
		}
		t.Errorf("no Preempted event naming %s on the victim; events: %s", highUID, strings.Join(got, "; "))
	}
	// The Never pod outranks the victim but evicted nothing, and the room
	// made for the higher one was not its.
	if p, _ := c.CoreV1().Pods("default").Get(ctx, "waiting", metav1.GetOptions{}); p.Spec.NodeName != "" {
		t.Errorf("the Never pod was bound to %s", p.Spec.NodeName)
	}
}
