package controllerutil

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"
	clocktesting "k8s.io/utils/clock/testing"

	"flotilla.dev/flotilla/internal/controlloop"
)

// TestPodControl: created and deleted pods get their events; creations
// that fail or are never tried, and deletions of pods already gone, are
// no longer expected, so the owner's next sync is not held up.
func TestPodControl(t *testing.T) {
	ctx := context.Background()
	gone := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "gone", UID: "u-gone"}}
	here := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "here", UID: "u-here"}}
	client := fake.NewClientset(here)
	rec := record.NewFakeRecorder(100)
	exp := NewExpectations(clocktesting.NewFakeClock(time.Now()))
	pc := &PodControl{Client: client, Recorder: rec, Expectations: exp}
	owner := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web"}}
	const key = "shop/web"

	exp.ExpectCreations(key, 4)
	created, err := pc.CreatePods(ctx, owner, key, 4, func(i int) (*corev1.Pod, error) {
		if i == 1 {
			return nil, errors.New("no labels")
		}
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", GenerateName: "web-", Name: "web-" + string(rune('a'+i))}}, nil
	})
	// Slow start: 1 succeeds, the batch of 2 holds the failure, the 4th is never tried.
	if created != 2 || err == nil || !strings.Contains(err.Error(), "no labels") {
		t.Errorf("CreatePods = %d, %v; want 2 and the error", created, err)
	}
	if add, _ := exp.Pending(key); add != 2 {
		t.Errorf("creations still expected: %d, want the 2 made", add)
	}

	exp.ExpectDeletions(key, []string{controlloop.ObjectKey(gone), controlloop.ObjectKey(here)})
	if err := pc.DeletePods(ctx, owner, key, []*corev1.Pod{gone, here}); err != nil {
		t.Fatal(err)
	}
	if _, del := exp.Pending(key); del != 1 {
		t.Errorf("deletions still expected: %d, want only the pod that was there", del)
	}
	close(rec.Events)
	var events []string
	for e := range rec.Events {
		events = append(events, e)
	}
	all := strings.Join(events, "\n")
	for _, want := range []string{"Normal SuccessfulCreate Created pod: web-a", "Warning FailedCreate Error creating: no labels", "Normal SuccessfulDelete Deleted pod: here"} {
		if !strings.Contains(all, want) {
			t.Errorf("events lack %q:\n%s", want, all)
		}
	}
}

func TestStillOwner(t *testing.T) {
	owner := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", UID: "u1"}}
	check := func(fresh *appsv1.ReplicaSet) error {
		return StillOwner(owner, func(context.Context) (metav1.Object, error) { return fresh, nil })(context.Background())
	}
	if err := check(owner); err != nil {
		t.Errorf("the same owner: %v", err)
	}
	if err := check(&appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{UID: "u2"}}); err == nil || !strings.Contains(err.Error(), "recreated") {
		t.Errorf("a recreated owner: %v", err)
	}
	now := metav1.Now()
	if err := check(&appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{UID: "u1", DeletionTimestamp: &now}}); err == nil || !strings.Contains(err.Error(), "being deleted") {
		t.Errorf("an owner being deleted: %v", err)
	}
}
