package apiserver

import (
	"testing"
	"time"

	"flotilla.dev/flotilla/api/agentapi"
)

func TestUsageGoesStaleAfterThreeMissedIntervals(t *testing.T) {
	got := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	u := &storedUsage{Received: got, Report: agentapi.UsageReport{IntervalS: 60}}
	for _, c := range []struct {
		after time.Duration
		fresh bool
	}{{0, true}, {179 * time.Second, true}, {180 * time.Second, true}, {181 * time.Second, false}, {time.Hour, false}} {
		if f := u.fresh(got.Add(c.after)); f != c.fresh {
			t.Errorf("%v after receipt: fresh %v, want %v", c.after, f, c.fresh)
		}
	}
}

func TestDecodeUsageIndexesThePods(t *testing.T) {
	u, err := decodeUsage([]byte(`{"r":"2026-01-01T00:00:00Z","u":{"t":"2026-01-01T00:00:00Z","w":1,"i":1,"p":[{"ns":"a","n":"x","c":[]},{"ns":"b","n":"x","c":[]}]}}`))
	if err != nil {
		t.Fatal(err)
	}
	if i, ok := u.pods["b/x"]; !ok || i != 1 {
		t.Errorf("pods index = %v, want b/x at 1", u.pods)
	}
	if _, err := decodeUsage([]byte(`{"u":`)); err == nil {
		t.Error("a truncated report decoded")
	}
}
