package podutil

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"flotilla.dev/flotilla/api"
)

var now = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

func podWith(conds ...corev1.PodCondition) *corev1.Pod {
	return &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: conds}}
}

func ready(s corev1.ConditionStatus, since time.Time) corev1.PodCondition {
	return corev1.PodCondition{Type: corev1.PodReady, Status: s, LastTransitionTime: metav1.NewTime(since)}
}

func TestConditionFindsTheFirstOfItsType(t *testing.T) {
	p := podWith(
		corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionTrue},
		ready(corev1.ConditionFalse, now),
		ready(corev1.ConditionTrue, now),
	)
	c := Condition(&p.Status, corev1.PodReady)
	if c == nil || c.Status != corev1.ConditionFalse {
		t.Fatalf("Condition(Ready) = %+v, want the first Ready condition (False)", c)
	}
	c.Reason = "changed"
	if p.Status.Conditions[1].Reason != "changed" {
		t.Error("Condition returned a copy, want a pointer into the status")
	}
	if Condition(&p.Status, corev1.PodInitialized) != nil {
		t.Error("Condition(Initialized) found a condition the pod does not have")
	}
	if !ConditionTrue(&p.Status, corev1.PodScheduled) || ConditionTrue(&p.Status, corev1.PodReady) {
		t.Error("ConditionTrue: want Scheduled true and Ready false")
	}
}

func TestIsReady(t *testing.T) {
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		want bool
	}{
		{"no conditions", podWith(), false},
		{"ready", podWith(ready(corev1.ConditionTrue, now)), true},
		{"not ready", podWith(ready(corev1.ConditionFalse, now)), false},
		{"unknown", podWith(ready(corev1.ConditionUnknown, now)), false},
		{"only scheduled", podWith(corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}), false},
	} {
		if got := IsReady(tc.pod); got != tc.want {
			t.Errorf("%s: IsReady = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestReadySince(t *testing.T) {
	since := now.Add(-time.Minute)
	if got := ReadySince(podWith(ready(corev1.ConditionTrue, since))); got == nil || !got.Time.Equal(since) {
		t.Errorf("ReadySince of a ready pod = %v, want %v", got, since)
	}
	if got := ReadySince(podWith(ready(corev1.ConditionFalse, since))); got != nil {
		t.Errorf("ReadySince of a not-ready pod = %v, want nil", got)
	}
}

func TestIsAvailable(t *testing.T) {
	for _, tc := range []struct {
		name     string
		pod      *corev1.Pod
		minReady int32
		want     bool
	}{
		{"not ready", podWith(ready(corev1.ConditionFalse, now.Add(-time.Hour))), 0, false},
		{"ready, no minReadySeconds", podWith(ready(corev1.ConditionTrue, now)), 0, true},
		{"ready too briefly", podWith(ready(corev1.ConditionTrue, now.Add(-9*time.Second))), 10, false},
		{"ready exactly long enough", podWith(ready(corev1.ConditionTrue, now.Add(-10*time.Second))), 10, true},
		{"ready long enough", podWith(ready(corev1.ConditionTrue, now.Add(-time.Minute))), 10, true},
		{"ready since an unknown time", podWith(ready(corev1.ConditionTrue, time.Time{})), 10, false},
		{"ready since an unknown time, no minReadySeconds", podWith(ready(corev1.ConditionTrue, time.Time{})), 0, true},
	} {
		if got := IsAvailable(tc.pod, tc.minReady, now); got != tc.want {
			t.Errorf("%s: IsAvailable(minReadySeconds %d) = %v, want %v", tc.name, tc.minReady, got, tc.want)
		}
	}
}

func TestIsTerminalAndIsActive(t *testing.T) {
	deleting := metav1.NewTime(now)
	for _, tc := range []struct {
		phase            corev1.PodPhase
		deleting         bool
		terminal, active bool
	}{
		{corev1.PodPending, false, false, true},
		{corev1.PodRunning, false, false, true},
		{corev1.PodUnknown, false, false, true},
		{corev1.PodSucceeded, false, true, false},
		{corev1.PodFailed, false, true, false},
		{corev1.PodRunning, true, false, false},
	} {
		p := &corev1.Pod{Status: corev1.PodStatus{Phase: tc.phase}}
		if tc.deleting {
			p.DeletionTimestamp = &deleting
		}
		if got := IsTerminal(p); got != tc.terminal {
			t.Errorf("%s (deleting %v): IsTerminal = %v, want %v", tc.phase, tc.deleting, got, tc.terminal)
		}
		if got := IsActive(p); got != tc.active {
			t.Errorf("%s (deleting %v): IsActive = %v, want %v", tc.phase, tc.deleting, got, tc.active)
		}
	}
}

func TestIsMirror(t *testing.T) {
	mirror := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{api.AnnotationMirrorPod: ""}}}
	if !IsMirror(mirror) {
		t.Error("a pod with the mirror annotation (even empty) is not a mirror")
	}
	plain := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{"other": "x"}}}
	if IsMirror(plain) || IsMirror(&corev1.Pod{}) {
		t.Error("a pod without the mirror annotation is a mirror")
	}
}
