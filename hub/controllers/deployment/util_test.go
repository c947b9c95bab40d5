package deployment

import (
	"testing"

	"k8s.io/apimachinery/pkg/util/intstr"
)

func TestResolveFenceposts(t *testing.T) {
	for _, tc := range []struct {
		surge, unavail intstr.IntOrString
		desired        int32
		wantS, wantU   int32
	}{
		{intstr.FromString("25%"), intstr.FromString("25%"), 10, 3, 2}, // surge rounds up, unavailable down
		{intstr.FromInt32(1), intstr.FromInt32(0), 3, 1, 0},
		{intstr.FromInt32(0), intstr.FromInt32(0), 3, 0, 1}, // never stuck
		{intstr.FromString("10%"), intstr.FromString("10%"), 3, 1, 0},
		{intstr.FromString("50%"), intstr.FromString("50%"), 3, 2, 1},
		{intstr.FromString("100%"), intstr.FromString("0%"), 100, 100, 0},
	} {
		s, u, err := ResolveFenceposts(&tc.surge, &tc.unavail, tc.desired)
		if err != nil || s != tc.wantS || u != tc.wantU {
			t.Errorf("ResolveFenceposts(%s, %s, %d) = %d, %d, %v; want %d, %d", tc.surge.String(), tc.unavail.String(), tc.desired, s, u, err, tc.wantS, tc.wantU)
		}
	}
	bad := intstr.FromString("lots")
	if _, _, err := ResolveFenceposts(&bad, nil, 3); err == nil {
		t.Error("ResolveFenceposts accepted maxSurge \"lots\"")
	}
}
