package apiserver

import (
	"testing"
	"time"
)

func TestWatchTimeout(t *testing.T) {
	s := &Server{limits: newLimiters(Limits{MinWatchTimeout: time.Minute}, time.Now)}
	for _, tc := range []struct {
		asked    string
		min, max time.Duration
	}{
		{"", time.Minute, 2 * time.Minute},
		{"0", time.Minute, 2 * time.Minute},
		{"30", 30 * time.Second, 30 * time.Second},
		{"60", time.Minute, time.Minute},
		{"90", time.Minute, 90 * time.Second},
		{"3600", time.Minute, 2 * time.Minute},
		{"9223372036854775807", time.Minute, 2 * time.Minute},
	} {
		for range 20 {
			d, err := s.watchTimeout(tc.asked)
			if err != nil || d < tc.min || d > tc.max {
				t.Fatalf("timeoutSeconds=%q: %v %v, want between %v and %v", tc.asked, d, err, tc.min, tc.max)
			}
		}
	}
	for _, bad := range []string{"-1", "x", "1.5"} {
		if _, err := s.watchTimeout(bad); err == nil {
			t.Errorf("timeoutSeconds=%q accepted", bad)
		}
	}
}
