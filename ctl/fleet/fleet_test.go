package fleet

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metricsv1beta1 "k8s.io/metrics/pkg/apis/metrics/v1beta1"

	"flotilla.dev/flotilla/api/agentapi"
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

func TestUsageAndDevicesRunningLow(t *testing.T) {
	s := fleetOf(4, 1)
	for i := range s.Nodes {
		s.Nodes[i].Status.Capacity = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("1Gi")}
	}
	fs := func(avail uint64) map[string]string {
		return map[string]string{agentapi.AnnotationFilesystems: fmt.Sprintf(`[{"n":"data","c":1000,"a":%d},{"n":"containerd","c":1000,"a":%d}]`, avail, avail)}
	}
	m := func(name, cpu, mem string, ann map[string]string) metricsv1beta1.NodeMetrics {
		return metricsv1beta1.NodeMetrics{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: ann},
			Usage: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem)}}
	}
	s.NodeMetrics = []metricsv1beta1.NodeMetrics{
		m("dev-000", "1900m", "1000Mi", fs(10)), // offline: its last figures are not shown
		m("dev-001", "500m", "256Mi", fs(500)),
		m("dev-002", "1800m", "950Mi", fs(50)), // CPU 90 %, memory 92 %, 5 % free on one filesystem (listed once)
		// dev-003 reported nothing
	}
	r := Summarize(s)
	if len(r.LowDevices) != 1 || r.LowDevices[0].Name != "dev-002" {
		t.Fatalf("low devices = %+v, want dev-002", r.LowDevices)
	}
	if got := strings.Join(r.LowDevices[0].Usage.Low, ", "); got != "CPU 90%, memory 92%, disk containerd 5% free" {
		t.Errorf("dev-002 runs low on %q", got)
	}
	if u := r.Devices[1].Usage; u.CPUPercent != 25 || u.MemoryPercent != 25 || u.DiskPercent != 50 || len(u.Low) != 0 {
		t.Errorf("dev-001 usage = %+v, want 25%% CPU and memory, 50%% disk, nothing low", u)
	}
	var buf bytes.Buffer
	if err := Render(&buf, r, Options{}); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, want := range []string{"dev-002           running low: CPU 90%, memory 92%, disk containerd 5% free", "CPU  MEMORY  DISK",
		"25%  25%     50%", "-    -       -"} {
		if !strings.Contains(out, want) {
			t.Errorf("render lacks %q:\n%s", want, out)
		}
	}
}
