package rollout

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func deploy(gen, observed int64, want, replicas, updated, available int32, conds ...appsv1.DeploymentCondition) *appsv1.Deployment {
	return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web", Generation: gen, UID: "d1"}, Spec: appsv1.DeploymentSpec{Replicas: &want},
		Status: appsv1.DeploymentStatus{ObservedGeneration: observed, Replicas: replicas, UpdatedReplicas: updated, AvailableReplicas: available, Conditions: conds}}
}

func TestDeploymentStatus(t *testing.T) {
	deadline := appsv1.DeploymentCondition{Type: appsv1.DeploymentProgressing, Reason: "ProgressDeadlineExceeded", Message: "timed out"}
	for _, tc := range []struct {
		d    *appsv1.Deployment
		want string
		done bool
		fail bool
	}{
		{deploy(2, 1, 3, 3, 3, 3), "Waiting for deployment spec update to be observed...", false, false},
		{deploy(1, 1, 3, 3, 1, 1), "1 out of 3 new replicas have been updated", false, false},
		{deploy(1, 1, 3, 4, 3, 3), "1 old replicas are pending termination", false, false},
		{deploy(1, 1, 3, 3, 3, 2), "2 of 3 updated replicas are available", false, false},
		{deploy(1, 1, 3, 3, 3, 3), `deployment "web" successfully rolled out`, true, false},
		{deploy(1, 1, 3, 3, 1, 1, deadline), "", false, true},
	} {
		st := DeploymentStatus(tc.d)
		if !strings.Contains(st.Message, tc.want) || st.Done != tc.done || (st.Err != nil) != tc.fail {
			t.Errorf("%+v: got %+v", tc.d.Status, st)
		}
		if tc.fail && (!errors.Is(st.Err, ErrFailed) || !strings.Contains(st.Err.Error(), "timed out")) {
			t.Errorf("failure %v", st.Err)
		}
	}
}

func TestDaemonSetStatus(t *testing.T) {
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "probe"}, Status: appsv1.DaemonSetStatus{DesiredNumberScheduled: 4, UpdatedNumberScheduled: 2, NumberAvailable: 2}}
	if st := DaemonSetStatus(ds); !strings.Contains(st.Message, "2 out of 4 new pods have been updated") || st.Done {
		t.Errorf("%+v", st)
	}
	ds.Status.UpdatedNumberScheduled = 4
	if st := DaemonSetStatus(ds); !strings.Contains(st.Message, "2 of 4 updated pods are available") {
		t.Errorf("%+v", st)
	}
	ds.Status.NumberAvailable = 4
	if st := DaemonSetStatus(ds); !st.Done {
		t.Errorf("%+v", st)
	}
	ds.Spec.UpdateStrategy.Type = appsv1.OnDeleteDaemonSetStrategyType
	if st := DaemonSetStatus(ds); !errors.Is(st.Err, ErrFailed) {
		t.Errorf("OnDelete: %+v", st)
	}
}

func rs(rev, image string, owned bool) appsv1.ReplicaSet {
	r := appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: "web-" + rev, Annotations: map[string]string{RevisionAnnotation: rev}}}
	if owned {
		r.OwnerReferences = []metav1.OwnerReference{{UID: "d1", Controller: ptr(true)}}
	}
	r.Spec.Template.Labels = map[string]string{"app": "web", "pod-template-hash": rev}
	r.Spec.Template.Spec.Containers = []corev1.Container{{Name: "app", Image: image}}
	return r
}

func ptr[T any](v T) *T { return &v }

func TestHistoryAndUndo(t *testing.T) {
	d := deploy(1, 1, 1, 1, 1, 1)
	rss := []appsv1.ReplicaSet{rs("3", "img:3", true), rs("1", "img:1", true), rs("2", "img:2", false), rs("x", "img:x", true)}
	h := History(d, rss)
	if len(h) != 2 || h[0].Number != 1 || h[1].Number != 3 {
		t.Fatalf("history %+v", h)
	}
	patch, rev, err := UndoPatch("deployment", d.Name, d.Annotations, h, 0)
	if err != nil || rev != 1 {
		t.Fatalf("undo: %d %v", rev, err)
	}
	var ops []struct {
		Op, Path string
		Value    corev1.PodTemplateSpec
	}
	if err := json.Unmarshal(patch, &ops); err != nil {
		t.Fatal(err)
	}
	if ops[0].Path != "/spec/template" || ops[0].Value.Spec.Containers[0].Image != "img:1" || ops[0].Value.Labels["pod-template-hash"] != "" {
		t.Errorf("undo patch %s", patch)
	}
	if _, _, err := UndoPatch("deployment", d.Name, d.Annotations, h, 2); err == nil || !strings.Contains(err.Error(), "1, 3") {
		t.Errorf("undo to a revision it does not own: %v", err)
	}
	if _, _, err := UndoPatch("deployment", d.Name, d.Annotations, History(d, rss[:1]), 0); err == nil {
		t.Error("undo without a previous revision")
	}
	if got := string(RestartPatch(time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC))); got != `{"spec":{"template":{"metadata":{"annotations":{"kubectl.kubernetes.io/restartedAt":"2025-03-01T12:00:00Z"}}}}}` {
		t.Errorf("restart patch %s", got)
	}
}
