package fleet

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"flotilla.dev/flotilla/ctl/diagnose"
	"flotilla.dev/flotilla/ctl/term"
)

var now = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

func fleetOf(n int, offline int) *Snapshot {
	s := &Snapshot{}
	s.Now = now
	for i := 0; i < n; i++ {
		st := corev1.ConditionTrue
		if i < offline {
			st = corev1.ConditionFalse
		}
		arch := "amd64"
		if i%2 == 1 {
			arch = "arm64"
		}
		name := fmt.Sprintf("dev-%03d", i)
		s.Nodes = append(s.Nodes, corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name},
			Status: corev1.NodeStatus{NodeInfo: corev1.NodeSystemInfo{Architecture: arch, KubeletVersion: "v0.2.0"},
				Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: st, LastHeartbeatTime: metav1.NewTime(now.Add(-time.Duration(i+1) * time.Minute))}}}})
		s.Pods = append(s.Pods, corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "p-" + name}, Spec: corev1.PodSpec{NodeName: name},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
				ContainerStatuses: []corev1.ContainerStatus{{Ready: true, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}}})
	}
	return s
}

func TestSummarizeCountsAndProblems(t *testing.T) {
	r := Summarize(fleetOf(6, 2))
	if r.Online != 4 || r.Offline != 2 || r.PodsReady != 6 || r.PodsWanted != 6 {
		t.Errorf("counts %+v", r)
	}
	if len(r.ByArch) != 2 || r.ByArch[0] != (Count{"amd64", 2, 1}) || r.ByArch[1] != (Count{"arm64", 2, 1}) {
		t.Errorf("by arch %+v", r.ByArch)
	}
	// Pods on offline devices are covered by the device's problem.
	if len(r.Problems) != 2 || r.Problems[0].Stage != diagnose.StageDevice {
		t.Errorf("problems %+v", r.Problems)
	}
	// Longest-gone device first.
	if r.OfflineDevices[0].Name != "dev-001" {
		t.Errorf("offline order %+v", r.OfflineDevices)
	}
}

func TestRenderCapsAndColour(t *testing.T) {
	r := Summarize(fleetOf(60, 0))
	var buf bytes.Buffer
	if err := Render(&buf, r, Options{MaxDevices: 10}); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	if strings.Count(out, "dev-0") != 10 || !strings.Contains(out, "… 50 more devices") || !strings.Contains(out, "No problems") {
		t.Errorf("capped render:\n%s", out)
	}
	if strings.Contains(out, "\x1b[") {
		t.Error("colour without a terminal style")
	}
	buf.Reset()
	if err := Render(&buf, Summarize(fleetOf(3, 1)), Options{Style: term.Style{Color: true}}); err != nil {
		t.Fatal(err)
	}
	// Colour codes must not break the column alignment.
	if !strings.Contains(buf.String(), "\x1b[31m") {
		t.Fatalf("no red for the offline device:\n%s", buf.String())
	}
	lines := strings.Split(buf.String(), "\n")
	var archCols []int
	for _, l := range lines {
		if strings.HasPrefix(l, "  dev-") {
			plain := ansi.ReplaceAllString(l, "")
			i := strings.Index(plain, "amd64")
			if i < 0 {
				i = strings.Index(plain, "arm64")
			}
			archCols = append(archCols, i)
		}
	}
	if len(archCols) != 3 {
		t.Fatalf("device rows: %v\n%s", archCols, buf.String())
	}
	for _, c := range archCols[1:] {
		if c != archCols[0] {
			t.Errorf("ARCH column misaligned by colour: %v\n%s", archCols, buf.String())
		}
	}
}

func TestBar(t *testing.T) {
	for _, tc := range []struct {
		u, r, d int32
		want    string
	}{
		{0, 0, 4, "[..........]"}, {2, 1, 4, "[##+++.....]"}, {4, 4, 4, "[##########]"}, {5, 5, 4, "[##########]"}, {1, 1, 0, ""},
	} {
		if got := bar(tc.u, tc.r, tc.d); got != tc.want {
			t.Errorf("bar(%d,%d,%d) = %q, want %q", tc.u, tc.r, tc.d, got, tc.want)
		}
	}
}
