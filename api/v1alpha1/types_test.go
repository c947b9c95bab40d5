package v1alpha1

import "testing"

func TestReconcileRequest(t *testing.T) {
	const early, late = "2025-03-01T12:00:00Z", "2025-03-01T12:00:01.5Z"
	for _, tc := range []struct {
		name      string
		own, flux string
		want      string
	}{
		{"none", "", "", ""},
		{"flotilla's alone", early, "", early},
		{"flux's alone", "", early, early},
		{"flux's later", early, late, late},
		{"flotilla's later", late, early, late},
		// Not times: the hub cannot order them, so its own name wins.
		{"opaque values", "b", "a", "b"},
		{"one opaque", "x", late, "x"},
	} {
		ann := map[string]string{"unrelated": "1"}
		if tc.own != "" {
			ann[AnnotationReconcileRequestedAt] = tc.own
		}
		if tc.flux != "" {
			ann[AnnotationFluxReconcileRequestedAt] = tc.flux
		}
		if got := ReconcileRequest(ann); got != tc.want {
			t.Errorf("%s: got %q, want %q", tc.name, got, tc.want)
		}
	}
}
