package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"flotilla.dev/flotilla/api/v1alpha1"
)

// request sets a reconcile request annotation on the source.
func (f *fixture) request(name, annotation, value string) {
	f.t.Helper()
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{annotation: value}}})
	if _, err := f.dyn.Resource(gvr).Namespace("default").Patch(context.Background(), name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		f.t.Fatal(err)
	}
}

// waitHandled waits until the status names value as the last handled
// request and returns the status of that moment.
func (f *fixture) waitHandled(name, value string) *v1alpha1.GitSource {
	f.t.Helper()
	var gs *v1alpha1.GitSource
	f.eventually("request "+value+" is handled", func() (bool, string) {
		gs = f.source(name)
		return gs.Status.LastHandledReconcileAt == value, fmt.Sprintf("handled %q, applied %s, message %q", gs.Status.LastHandledReconcileAt, gs.Status.LastAppliedCommit, gs.Status.Message)
	})
	return gs
}

// configMapA is a revision holding the ConfigMap a with v in its data.
func configMapA(v string) map[string]string {
	return map[string]string{"a.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\ndata: {v: \"" + v + "\"}\n"}
}

func TestReconcileRequestFetchesAtOnce(t *testing.T) {
	f := newFixture(t, nil)
	c1 := f.commit("one", configMapA("1"))
	// An hour between polls: only a request can fetch the later commits.
	f.createSource("s", func(gs *v1alpha1.GitSource) { gs.Spec.Interval = &metav1.Duration{Duration: time.Hour} })
	f.waitApplied("s", c1)

	// The answer is written with the request's outcome in one status
	// update: once the request shows as handled, the new commit is applied.
	c2 := f.commit("two", configMapA("2"))
	const t1 = "2025-03-01T12:00:00Z"
	f.request("s", v1alpha1.AnnotationReconcileRequestedAt, t1)
	gs := f.waitHandled("s", t1)
	if gs.Status.LastAppliedCommit != c2 || gs.Status.LastAttemptedCommit != c2 {
		t.Fatalf("request handled with applied %s, attempted %s; want %s", gs.Status.LastAppliedCommit, gs.Status.LastAttemptedCommit, c2)
	}
	if c := findCondition(gs.Status.Conditions, v1alpha1.ConditionReady); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("Ready after the request: %+v", c)
	}

	// A request that finds nothing new is answered all the same.
	const t2 = "2025-03-01T12:00:01Z"
	f.request("s", v1alpha1.AnnotationReconcileRequestedAt, t2)
	if gs := f.waitHandled("s", t2); gs.Status.LastAppliedCommit != c2 {
		t.Errorf("a request with nothing new applied %s", gs.Status.LastAppliedCommit)
	}

	// Flux's annotation, later than Flotilla's, is a request too.
	c3 := f.commit("three", configMapA("3"))
	const t3 = "2025-03-01T12:00:02Z"
	f.request("s", v1alpha1.AnnotationFluxReconcileRequestedAt, t3)
	if gs := f.waitHandled("s", t3); gs.Status.LastAppliedCommit != c3 {
		t.Errorf("Flux's request handled with %s applied, want %s", gs.Status.LastAppliedCommit, c3)
	}

	// A broken commit: the request is answered with the failure, and the
	// last good commit stays applied.
	c4 := f.commit("four", map[string]string{"a.yaml": "kind: [\n"})
	const t4 = "2025-03-01T12:00:03Z"
	f.request("s", v1alpha1.AnnotationReconcileRequestedAt, t4)
	gs = f.waitHandled("s", t4)
	if gs.Status.LastAttemptedCommit != c4 || gs.Status.LastAppliedCommit != c3 {
		t.Errorf("broken commit: attempted %s applied %s, want %s and %s", gs.Status.LastAttemptedCommit, gs.Status.LastAppliedCommit, c4, c3)
	}
	if c := findCondition(gs.Status.Conditions, v1alpha1.ConditionReady); c == nil || c.Status != metav1.ConditionFalse || c.Reason != ReasonValidationFailed {
		t.Errorf("Ready after a broken commit: %+v", c)
	}
}
