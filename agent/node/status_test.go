package node

import (
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const (
	mi = 1 << 20
	gi = 1 << 30
)

func TestCapacityAndAllocatable(t *testing.T) {
	s := Stats{CPUs: 4, MemoryTotal: 2 * gi, DiskTotal: 100 * gi, PIDMax: 4194304}
	c := Capacity(s, 110)
	a := Allocatable(s, 110)
	for _, tc := range []struct {
		list corev1.ResourceList
		name corev1.ResourceName
		want string
	}{
		{c, corev1.ResourceCPU, "4"},
		{c, corev1.ResourceMemory, "2Gi"},
		{c, corev1.ResourceEphemeralStorage, "100Gi"},
		{c, corev1.ResourcePods, "110"},
		{a, corev1.ResourceCPU, "4"},
		{a, corev1.ResourceMemory, "1948Mi"},
		{a, corev1.ResourceEphemeralStorage, "90Gi"},
		{a, corev1.ResourcePods, "110"},
	} {
		q := tc.list[tc.name]
		if q.Cmp(resource.MustParse(tc.want)) != 0 {
			t.Errorf("%s = %s, want %s", tc.name, q.String(), tc.want)
		}
	}
	tiny := Allocatable(Stats{MemoryTotal: 50 * mi}, 1)
	if m := tiny[corev1.ResourceMemory]; m.Sign() != 0 {
		t.Errorf("allocatable memory of a 50Mi machine = %s, want 0", m.String())
	}
}

func TestPressure(t *testing.T) {
	ok := Stats{MemoryTotal: gi, MemoryAvailable: 500 * mi, DiskTotal: 100, DiskAvailable: 50, Procs: 100, PIDMax: 1000}
	for _, tc := range []struct {
		name string
		mod  func(*Stats)
		want Pressure
	}{
		{"none", func(*Stats) {}, Pressure{}},
		{"memory at threshold", func(s *Stats) { s.MemoryAvailable = 100 * mi }, Pressure{}},
		{"memory below", func(s *Stats) { s.MemoryAvailable = 100*mi - 1 }, Pressure{Memory: true}},
		{"disk at 10%", func(s *Stats) { s.DiskAvailable = 10 }, Pressure{}},
		{"disk below 10%", func(s *Stats) { s.DiskAvailable = 9 }, Pressure{Disk: true}},
		{"pids at 90%", func(s *Stats) { s.Procs = 900 }, Pressure{}},
		{"pids over 90%", func(s *Stats) { s.Procs = 901 }, Pressure{PID: true}},
		{"all", func(s *Stats) { s.MemoryAvailable, s.DiskAvailable, s.Procs = 0, 0, 1000 }, Pressure{true, true, true}},
		{"unknown totals", func(s *Stats) { s.DiskTotal, s.DiskAvailable, s.PIDMax = 0, 0, 0 }, Pressure{}},
	} {
		s := ok
		tc.mod(&s)
		if got := PressureOf(s); got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

func condOf(cs []corev1.NodeCondition, t corev1.NodeConditionType) *corev1.NodeCondition {
	for i := range cs {
		if cs[i].Type == t {
			return &cs[i]
		}
	}
	return nil
}

func TestConditions(t *testing.T) {
	cs := Conditions(Pressure{Memory: true}, nil)
	for typ, want := range map[corev1.NodeConditionType]corev1.ConditionStatus{
		corev1.NodeReady: corev1.ConditionTrue, corev1.NodeMemoryPressure: corev1.ConditionTrue,
		corev1.NodeDiskPressure: corev1.ConditionFalse, corev1.NodePIDPressure: corev1.ConditionFalse,
	} {
		c := condOf(cs, typ)
		if c == nil || c.Status != want || c.Reason == "" || c.Message == "" {
			t.Errorf("%s = %+v, want status %s with a reason and message", typ, c, want)
		}
	}
	nr := condOf(Conditions(Pressure{}, errors.New("container runtime is down")), corev1.NodeReady)
	if nr.Status != corev1.ConditionFalse || nr.Reason != "KubeletNotReady" || nr.Message != "container runtime is down" {
		t.Errorf("not ready = %+v", nr)
	}
}

func TestMergeConditionsKeepsTransitionsAndOthers(t *testing.T) {
	t0 := metav1.NewTime(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	t1 := metav1.NewTime(t0.Add(time.Minute))
	cur := []corev1.NodeCondition{
		{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastTransitionTime: t0, LastHeartbeatTime: t0},
		{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse, LastTransitionTime: t0},
		{Type: "NetworkUnavailable", Status: corev1.ConditionFalse, Reason: "RouteCreated", LastTransitionTime: t0},
	}
	want := Conditions(Pressure{Memory: true}, nil)
	out := mergeConditions(cur, want, t1)
	if len(out) != 5 {
		t.Fatalf("got %d conditions, want 5 (4 owned + 1 foreign): %+v", len(out), out)
	}
	if c := condOf(out, "NetworkUnavailable"); c == nil || c.Reason != "RouteCreated" || !c.LastTransitionTime.Equal(&t0) {
		t.Errorf("foreign condition changed: %+v", c)
	}
	if c := condOf(out, corev1.NodeReady); !c.LastTransitionTime.Equal(&t0) || !c.LastHeartbeatTime.Equal(&t1) {
		t.Errorf("Ready kept its status: transition %v (want %v), heartbeat %v (want %v)", c.LastTransitionTime, t0, c.LastHeartbeatTime, t1)
	}
	if c := condOf(out, corev1.NodeMemoryPressure); !c.LastTransitionTime.Equal(&t1) {
		t.Errorf("MemoryPressure flipped: transition %v, want %v", c.LastTransitionTime, t1)
	}
	if c := condOf(out, corev1.NodePIDPressure); c == nil || !c.LastTransitionTime.Equal(&t1) {
		t.Errorf("new PIDPressure: %+v", c)
	}
}

func testObservation() observation {
	s := Stats{CPUs: 2, MemoryTotal: gi, MemoryAvailable: 500 * mi, DiskTotal: 10 * gi, DiskAvailable: 5 * gi, Procs: 10, PIDMax: 1000}
	return observation{
		stats: s, capacity: Capacity(s, 110), allocatable: Allocatable(s, 110),
		addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.5"}},
		nodeInfo:  corev1.NodeSystemInfo{KernelVersion: "6.1.0", KubeletVersion: "v1.0.0"},
		port:      10250,
	}
}

func TestDesiredStatusChangeDetection(t *testing.T) {
	now := metav1.NewTime(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	o := testObservation()
	st, changed := desiredStatus(corev1.NodeStatus{}, o, now)
	if !changed {
		t.Fatal("an empty status must differ from the observation")
	}
	if st.DaemonEndpoints.KubeletEndpoint.Port != 10250 || st.NodeInfo.KernelVersion != "6.1.0" || len(st.Addresses) != 1 {
		t.Errorf("desired status misses owned fields: %+v", st)
	}
	later := metav1.NewTime(now.Add(10 * time.Second))
	if _, changed := desiredStatus(st, o, later); changed {
		t.Error("the same observation ten seconds later must not count as a change")
	}
	// Quantities that print differently but are equal are no change.
	st2 := *st.DeepCopy()
	st2.Capacity[corev1.ResourceMemory] = resource.MustParse("1024Mi")
	if _, changed := desiredStatus(st2, o, later); changed {
		t.Error("1024Mi and 1Gi are the same capacity")
	}
	for name, mod := range map[string]func(*observation){
		"memory pressure": func(o *observation) { o.stats.MemoryAvailable = 0 },
		"not ready":       func(o *observation) { o.readyErr = errors.New("no CNI") },
		"address": func(o *observation) {
			o.addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.6"}}
		},
		"disk capacity": func(o *observation) {
			o.capacity = Capacity(Stats{CPUs: 2, MemoryTotal: gi, DiskTotal: 20 * gi}, 110)
		},
		"runtime version": func(o *observation) { o.nodeInfo.ContainerRuntimeVersion = "containerd://2.0" },
		"port":            func(o *observation) { o.port = 10251 },
	} {
		o2 := testObservation()
		mod(&o2)
		if _, changed := desiredStatus(st, o2, later); !changed {
			t.Errorf("%s: change not detected", name)
		}
	}
	// Someone (the hub's node lifecycle controller) marked the node Unknown.
	unknown := *st.DeepCopy()
	condOf(unknown.Conditions, corev1.NodeReady).Status = corev1.ConditionUnknown
	if _, changed := desiredStatus(unknown, o, later); !changed {
		t.Error("Ready=Unknown on the hub must be corrected")
	}
}

func TestMergeMeta(t *testing.T) {
	fixed := map[string]string{"kubernetes.io/hostname": "dev1", "kubernetes.io/os": "linux"}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{
		Labels: map[string]string{
			"kubernetes.io/hostname": "old", "site": "berlin", "gone": "x",
			"node-role.kubernetes.io/edge": "", // set by an admin
		},
		Annotations: map[string]string{AnnotationAgentKeys: "gone,site", "admin/note": "hello"},
	}, Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: "maint", Effect: corev1.TaintEffectNoSchedule}}}}
	changed := mergeMeta(node, fixed, map[string]string{"site": "munich", "tier": "a"}, map[string]string{"x/pin": "abc"})
	if !changed {
		t.Fatal("mergeMeta reported no change")
	}
	want := map[string]string{
		"kubernetes.io/hostname": "dev1", "kubernetes.io/os": "linux", "site": "munich", "tier": "a",
		"node-role.kubernetes.io/edge": "",
	}
	if len(node.Labels) != len(want) {
		t.Errorf("labels = %v, want %v", node.Labels, want)
	}
	for k, v := range want {
		if got, ok := node.Labels[k]; !ok || got != v {
			t.Errorf("label %s = %q (present %v), want %q", k, got, ok, v)
		}
	}
	if node.Annotations[AnnotationAgentKeys] != "site,tier" || node.Annotations["admin/note"] != "hello" || node.Annotations["x/pin"] != "abc" {
		t.Errorf("annotations = %v", node.Annotations)
	}
	if len(node.Spec.Taints) != 1 {
		t.Errorf("taints changed: %v", node.Spec.Taints)
	}
	if mergeMeta(node, fixed, map[string]string{"site": "munich", "tier": "a"}, map[string]string{"x/pin": "abc"}) {
		t.Error("a second merge of the same labels must be no change")
	}
	// Dropping every configured label removes them and the bookkeeping.
	if !mergeMeta(node, fixed, nil, nil) {
		t.Fatal("dropping labels reported no change")
	}
	if _, ok := node.Labels["site"]; ok {
		t.Error("dropped label site is still there")
	}
	if _, ok := node.Annotations[AnnotationAgentKeys]; ok {
		t.Error("the agent-labels annotation should go with the last configured label")
	}
	if _, ok := node.Labels["node-role.kubernetes.io/edge"]; !ok {
		t.Error("an admin's label was removed")
	}
}

func TestValidateLabels(t *testing.T) {
	if err := ValidateLabels(map[string]string{"site": "berlin", "tier": "edge", "empty": ""}); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []map[string]string{{"bad key": "1"}, {"k": "bad value"}, {"kubernetes.io/hostname": "x"}, {"kubernetes.io/arch": "arm"}, {"node.flotilla.dev/autonomy": "true"}} {
		if err := ValidateLabels(bad); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "--labels") {
			t.Errorf("ValidateLabels(%v) = %v, want ErrConfig naming --labels", bad, err)
		}
	}
	if err := ValidateLabels(nil); err != nil {
		t.Errorf("no labels: %v", err)
	}
}

func TestParsers(t *testing.T) {
	total, avail, err := parseMeminfo(strings.NewReader("MemTotal:        2048000 kB\nMemFree:  10 kB\nMemAvailable:    1024000 kB\n"))
	if err != nil || total != 2048000*1024 || avail != 1024000*1024 {
		t.Errorf("parseMeminfo = %d %d %v", total, avail, err)
	}
	if _, _, err := parseMeminfo(strings.NewReader("MemTotal: 1 kB\n")); err == nil {
		t.Error("meminfo without MemAvailable must fail")
	}
	if n := prettyName([]byte("NAME=x\nPRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\n")); n != "Debian GNU/Linux 12 (bookworm)" {
		t.Errorf("prettyName = %q", n)
	}
	if n := prettyName([]byte("PRETTY_NAME='Alpine'\n")); n != "Alpine" {
		t.Errorf("prettyName single quotes = %q", n)
	}
	route := "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n" +
		"wlan0\t00000000\t0102A8C0\t0003\t0\t0\t600\t00000000\t0\t0\t0\n" +
		"eth0\t00000000\t010200C0\t0003\t0\t0\t100\t00000000\t0\t0\t0\n" +
		"eth0\t000200C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n"
	if ifname, err := defaultRouteInterface(strings.NewReader(route)); err != nil || ifname != "eth0" {
		t.Errorf("defaultRouteInterface = %q %v, want eth0 (lowest metric)", ifname, err)
	}
	noDefault := "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n" +
		"eth0\t000200C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n"
	if _, err := defaultRouteInterface(strings.NewReader(noDefault)); !errors.Is(err, ErrNoDefaultRoute) {
		t.Errorf("no default route: %v", err)
	}
}

func TestHostMachine(t *testing.T) {
	s, err := HostMachine{}.Stats(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if s.CPUs < 1 || s.MemoryTotal == 0 || s.MemoryAvailable > s.MemoryTotal || s.DiskTotal == 0 || s.DiskAvailable > s.DiskTotal || s.Procs == 0 || s.PIDMax == 0 {
		t.Errorf("implausible machine figures: %+v", s)
	}
	info, err := HostMachine{}.Info()
	if err != nil {
		t.Fatal(err)
	}
	if info.KernelVersion == "" || info.OSImage == "" || info.Architecture == "" || info.OperatingSystem != "linux" {
		t.Errorf("implausible system info: %+v", info)
	}
}
