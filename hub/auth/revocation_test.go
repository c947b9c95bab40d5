package auth

import (
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

func TestRevocationCoversTheWholeSecond(t *testing.T) {
	at := time.Date(2026, 12, 1, 10, 0, 7, 400e6, time.UTC)
	r := Revocation{User: "ann", RevokedAt: at}
	for _, tc := range []struct {
		issued time.Time
		want   bool
	}{
		{at.Add(-time.Hour), true},
		{time.Date(2026, 12, 1, 10, 0, 7, 0, time.UTC), true}, // same second: cannot tell, refused
		{time.Date(2026, 12, 1, 10, 0, 8, 0, time.UTC), false},
		{at.Add(time.Hour), false},
	} {
		if got := r.Covers(tc.issued); got != tc.want {
			t.Errorf("Covers(%s) = %v, want %v", tc.issued.Format(time.RFC3339Nano), got, tc.want)
		}
	}
	if nb := r.NotBefore(); !nb.Equal(time.Date(2026, 12, 1, 10, 0, 8, 0, time.UTC)) || r.Covers(nb) {
		t.Errorf("NotBefore = %s, and it is covered: %v", nb, r.Covers(nb))
	}
}

func TestRevocationConfigMapRoundTrip(t *testing.T) {
	r := Revocation{User: "system:node:till-3", RevokedAt: time.Date(2026, 12, 1, 10, 0, 7, 123456789, time.UTC), Reason: "stolen"}
	cm := r.ConfigMap()
	if cm.Namespace != RevocationNamespace || cm.Labels[LabelRevocation] != "true" || !strings.HasPrefix(cm.Name, "revoked-") || strings.Contains(cm.Name, ":") {
		t.Fatalf("ConfigMap = %s/%s %v", cm.Namespace, cm.Name, cm.Labels)
	}
	got, err := RevocationFrom(cm)
	if err != nil || got.User != r.User || !got.RevokedAt.Equal(r.RevokedAt) || got.Reason != r.Reason {
		t.Errorf("round trip = %+v, %v; want %+v", got, err, r)
	}
	if RevocationName("a") == RevocationName("b") {
		t.Error("two users share a revocation name")
	}
	// A hand-damaged time refuses everything of the user.
	cm.Data[keyRevokedAt] = "yesterday"
	got, err = RevocationFrom(cm)
	if err == nil || got.User != r.User || !got.Covers(time.Now().Add(100*365*24*time.Hour)) {
		t.Errorf("damaged revocation = %+v, %v; want an error and everything refused", got, err)
	}
	if _, err := RevocationFrom(&corev1.ConfigMap{}); err == nil {
		t.Error("a revocation without a user was accepted")
	}
}

func TestRevocationsCheck(t *testing.T) {
	v := NewRevocations()
	v.SyncWait = 10 * time.Millisecond
	now := time.Now()
	if err := v.Check("ann", now.Add(-time.Hour)); !errors.Is(err, ErrRevocationsLoading) || errors.Is(err, ErrRevoked) {
		t.Errorf("before the list loaded: err = %v, want a retry-later refusal", err)
	}
	v.MarkSynced()
	if err := v.Check("ann", now.Add(-time.Hour)); err != nil {
		t.Errorf("no revocation: %v", err)
	}
	v.Set("cm-1", Revocation{User: "ann", RevokedAt: now, Reason: "left"})
	err := v.Check("ann", now.Add(-time.Hour))
	if !errors.Is(err, ErrRevoked) || !strings.Contains(err.Error(), "left") || !strings.Contains(err.Error(), "kubeconfig create") {
		t.Errorf("revoked: err = %v", err)
	}
	if err := v.Check("ann", now.Add(2*time.Second)); err != nil {
		t.Errorf("a certificate issued after the revocation: %v", err)
	}
	if err := v.Check("bob", now.Add(-time.Hour)); err != nil {
		t.Errorf("another user: %v", err)
	}
	if err := v.Check(NodePrefix+"x", now); err != nil {
		t.Errorf("another user: %v", err)
	}
	v.Set("cm-2", Revocation{User: NodePrefix + "x", RevokedAt: now})
	if err := v.Check(NodePrefix+"x", now.Add(-time.Minute)); !errors.Is(err, ErrRevoked) || !strings.Contains(err.Error(), "new token") {
		t.Errorf("a revoked device: err = %v", err)
	}
	// Two ConfigMaps for one user (one copied by hand): removing one
	// keeps the other in force.
	v.Set("cm-3", Revocation{User: "ann", RevokedAt: now.Add(-time.Minute)})
	v.Remove("cm-1")
	if err := v.Check("ann", now.Add(-time.Hour)); !errors.Is(err, ErrRevoked) {
		t.Errorf("after removing one of two revocations: err = %v", err)
	}
	v.Remove("cm-3")
	if err := v.Check("ann", now.Add(-time.Hour)); err != nil {
		t.Errorf("after removing both: %v", err)
	}
}
