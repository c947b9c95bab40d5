package kubelet

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"flotilla.dev/flotilla/agent/cni"
	"flotilla.dev/flotilla/agent/runtime"
)

func TestBackoff(t *testing.T) {
	b := newBackoff(10*time.Second, 40*time.Second, 10*time.Minute)
	t0 := time.Unix(1000, 0)
	if d := b.wait("k", t0, t0); d != 0 {
		t.Fatalf("first retry waits %v", d)
	}
	b.next("k", t0) // first restart at t0: delay 10s
	finish := t0.Add(time.Second)
	if d := b.wait("k", finish, finish.Add(3*time.Second)); d != 7*time.Second {
		t.Fatalf("wait = %v, want 7s", d)
	}
	if d := b.wait("k", finish, finish.Add(10*time.Second)); d != 0 {
		t.Fatalf("wait after the delay = %v", d)
	}
	var delays []time.Duration
	now := finish.Add(10 * time.Second)
	for i := 0; i < 4; i++ {
		b.next("k", now)
		delays = append(delays, b.delay("k"))
		now = now.Add(time.Minute)
	}
	if !reflect.DeepEqual(delays, []time.Duration{20 * time.Second, 40 * time.Second, 40 * time.Second, 40 * time.Second}) {
		t.Fatalf("delays = %v", delays)
	}
	// Ten minutes of good running resets it.
	last := now.Add(-time.Minute)
	if d := b.wait("k", last.Add(10*time.Minute), last.Add(10*time.Minute)); d != 0 || b.delay("k") != 0 {
		t.Fatalf("after 10 min: wait %v, delay %v", d, b.delay("k"))
	}
	b.next("k", now)
	if b.delay("k") != 10*time.Second {
		t.Fatalf("delay after reset = %v", b.delay("k"))
	}
	b.next("uid-1/app", now)
	b.next("uid-2/app", now)
	b.forget("uid-1/")
	if b.delay("uid-1/app") != 0 || b.delay("uid-2/app") == 0 {
		t.Fatal("forget by prefix")
	}
	b.next("img", now)
	if d := b.waitSinceLast("img", now.Add(4*time.Second)); d != 6*time.Second {
		t.Fatalf("waitSinceLast = %v", d)
	}
}

func ctr(name string, attempt uint32, st runtime.Status) *runtime.Container {
	return &runtime.Container{ID: name + "-" + string(rune('a'+attempt)), Name: name, Attempt: attempt, Image: "reg/app@sha256:abc", Status: st, CreatedAt: time.Unix(50, 0)}
}

var (
	runningSt = runtime.Status{State: runtime.StateRunning, StartedAt: time.Unix(100, 500)}
	doneSt    = runtime.Status{State: runtime.StateExited, ExitCode: 0, Reason: "Completed", StartedAt: time.Unix(100, 0), FinishedAt: time.Unix(110, 0)}
	failSt    = runtime.Status{State: runtime.StateExited, ExitCode: 2, Reason: "Error", StartedAt: time.Unix(100, 0), FinishedAt: time.Unix(110, 0)}
	oomSt     = runtime.Status{State: runtime.StateExited, ExitCode: 137, OOMKilled: true, Reason: "OOMKilled", StartedAt: time.Unix(100, 0), FinishedAt: time.Unix(110, 0)}
)

func statusPod(policy corev1.RestartPolicy, inits ...string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u"},
		Spec: corev1.PodSpec{RestartPolicy: policy, Containers: []corev1.Container{{Name: "app", Image: "reg/app@sha256:abc"}, {Name: "side", Image: "reg/app@sha256:abc"}}}}
	for _, n := range inits {
		p.Spec.InitContainers = append(p.Spec.InitContainers, corev1.Container{Name: n, Image: "reg/app@sha256:abc"})
	}
	return p
}

func input(pod *corev1.Pod, cs ...*runtime.Container) statusInput {
	return statusInput{
		pod: pod, containers: byAttempt(cs), podIPs: []string{"10.42.0.5"}, hostIPs: []string{"192.168.1.2"},
		sandboxReady: true, waiting: map[string]waiting{}, startErrors: map[string]string{},
		ready: func(string, string) bool { return true }, started: func(string, string) bool { return true },
		imageID: func(s string) string { return s }, now: time.Unix(200, 0),
	}
}

func TestComputeStatusRunningAndReady(t *testing.T) {
	pod := statusPod(corev1.RestartPolicyAlways, "init")
	in := input(pod, ctr("init", 0, doneSt), ctr("app", 1, failSt), ctr("app", 2, runningSt), ctr("side", 0, runningSt))
	st := computeStatus(in)
	if st.Phase != corev1.PodRunning || st.PodIP != "10.42.0.5" || st.HostIP != "192.168.1.2" || len(st.PodIPs) != 1 || st.StartTime == nil || st.QOSClass != corev1.PodQOSBestEffort {
		t.Fatalf("status = %+v", st)
	}
	app := st.ContainerStatuses[0]
	if app.RestartCount != 2 || app.State.Running == nil || !app.Ready || app.ContainerID != "containerd://app-c" ||
		app.LastTerminationState.Terminated == nil || app.LastTerminationState.Terminated.ExitCode != 2 || app.ImageID != "reg/app@sha256:abc" {
		t.Fatalf("app = %+v", app)
	}
	if !app.State.Running.StartedAt.Equal(&metav1.Time{Time: time.Unix(100, 0)}) {
		t.Fatalf("times are not cut to seconds: %v", app.State.Running.StartedAt)
	}
	if init := st.InitContainerStatuses[0]; init.State.Terminated == nil || !init.Ready || init.State.Terminated.Reason != "Completed" {
		t.Fatalf("init = %+v", init)
	}
	for _, c := range st.Conditions {
		if c.Status != corev1.ConditionTrue {
			t.Errorf("condition %s = %s", c.Type, c.Status)
		}
	}
	// Transition times stay while conditions hold.
	in.old = st
	in.now = time.Unix(500, 0)
	again := computeStatus(in)
	if !reflect.DeepEqual(again, st) {
		t.Fatalf("recomputing an unchanged pod changed its status:\n%+v\n%+v", st, again)
	}

	// Readiness fails: Ready and ContainersReady go False, with reasons,
	// and new transition times.
	in.ready = func(name, _ string) bool { return name != "side" }
	unready := computeStatus(in)
	r := findCondition(unready.Conditions, corev1.PodReady)
	if r.Status != corev1.ConditionFalse || r.Reason != "ContainersNotReady" || r.Message != "containers with unready status: [side]" || !r.LastTransitionTime.Equal(&metav1.Time{Time: time.Unix(500, 0)}) {
		t.Fatalf("Ready = %+v", r)
	}
	if unready.Phase != corev1.PodRunning {
		t.Fatal("an unready pod is still Running")
	}
}

func TestComputeStatusWaitingReasons(t *testing.T) {
	pod := statusPod(corev1.RestartPolicyAlways, "init")
	in := input(pod)
	st := computeStatus(in)
	if st.Phase != corev1.PodPending {
		t.Fatalf("phase = %s", st.Phase)
	}
	for _, cs := range append(st.InitContainerStatuses, st.ContainerStatuses...) {
		if cs.State.Waiting == nil || cs.State.Waiting.Reason != "PodInitializing" {
			t.Fatalf("%s = %+v", cs.Name, cs.State)
		}
	}
	if c := findCondition(st.Conditions, corev1.PodInitialized); c.Status != corev1.ConditionFalse || c.Message != "containers with incomplete status: [init]" {
		t.Fatalf("Initialized = %+v", c)
	}

	pod = statusPod(corev1.RestartPolicyAlways)
	in = input(pod, ctr("side", 3, failSt))
	in.waiting = map[string]waiting{
		"app":  {Reason: "CreateContainerConfigError", Message: `configmap "x" not found`},
		"side": {Reason: "CrashLoopBackOff", Message: "back-off 40s restarting failed container=side"},
	}
	st = computeStatus(in)
	app, side := st.ContainerStatuses[0], st.ContainerStatuses[1]
	if app.State.Waiting.Reason != "CreateContainerConfigError" || app.State.Waiting.Message != `configmap "x" not found` {
		t.Fatalf("app = %+v", app.State)
	}
	if side.State.Waiting.Reason != "CrashLoopBackOff" || side.LastTerminationState.Terminated.ExitCode != 2 || side.RestartCount != 3 || side.Ready {
		t.Fatalf("side = %+v", side)
	}
	if st.Phase != corev1.PodPending {
		t.Fatalf("phase = %s (a container never started)", st.Phase)
	}

	// A container that failed to start reads as StartError.
	notStarted := ctr("app", 0, runtime.Status{State: runtime.StateCreated})
	in = input(pod, notStarted, ctr("side", 0, runningSt))
	in.startErrors[notStarted.ID] = `exec: "/bin/nope": no such file`
	st = computeStatus(in)
	term := st.ContainerStatuses[0].State.Terminated
	if term == nil || term.Reason != "StartError" || term.ExitCode != 128 || !strings.Contains(term.Message, "/bin/nope") {
		t.Fatalf("start error = %+v", st.ContainerStatuses[0].State)
	}
}

func TestPodPhase(t *testing.T) {
	cases := []struct {
		name   string
		policy corev1.RestartPolicy
		inits  []*runtime.Container
		apps   []*runtime.Container
		want   corev1.PodPhase
	}{
		{"all done", corev1.RestartPolicyNever, nil, []*runtime.Container{ctr("app", 0, doneSt), ctr("side", 0, doneSt)}, corev1.PodSucceeded},
		{"one failed, never", corev1.RestartPolicyNever, nil, []*runtime.Container{ctr("app", 0, failSt), ctr("side", 0, doneSt)}, corev1.PodFailed},
		{"oom, never", corev1.RestartPolicyNever, nil, []*runtime.Container{ctr("app", 0, oomSt), ctr("side", 0, doneSt)}, corev1.PodFailed},
		{"one still running", corev1.RestartPolicyNever, nil, []*runtime.Container{ctr("app", 0, failSt), ctr("side", 0, runningSt)}, corev1.PodRunning},
		{"all done, always", corev1.RestartPolicyAlways, nil, []*runtime.Container{ctr("app", 0, doneSt), ctr("side", 0, doneSt)}, corev1.PodRunning},
		{"all done, on failure", corev1.RestartPolicyOnFailure, nil, []*runtime.Container{ctr("app", 0, doneSt), ctr("side", 0, doneSt)}, corev1.PodSucceeded},
		{"failed, on failure", corev1.RestartPolicyOnFailure, nil, []*runtime.Container{ctr("app", 0, failSt), ctr("side", 0, doneSt)}, corev1.PodRunning},
		{"init failed, never", corev1.RestartPolicyNever, []*runtime.Container{ctr("init", 0, failSt)}, nil, corev1.PodFailed},
		{"init failed, always", corev1.RestartPolicyAlways, []*runtime.Container{ctr("init", 0, failSt)}, nil, corev1.PodPending},
		{"init running", corev1.RestartPolicyNever, []*runtime.Container{ctr("init", 0, runningSt)}, nil, corev1.PodPending},
		{"nothing yet", corev1.RestartPolicyAlways, nil, nil, corev1.PodPending},
	}
	for _, tc := range cases {
		var inits []string
		if tc.inits != nil {
			inits = []string{"init"}
		}
		pod := statusPod(tc.policy, inits...)
		in := input(pod, append(tc.inits, tc.apps...)...)
		// The kubelet stops restarting what the policy does not restart;
		// what it will restart waits in backoff.
		for _, c := range append(tc.inits, tc.apps...) {
			if c.Status.State == runtime.StateExited && shouldRestart(tc.policy, c) && !(c.Name == "init" && c.Status.ExitCode == 0) {
				in.waiting[c.Name] = waiting{Reason: "CrashLoopBackOff"}
			}
		}
		if got := computeStatus(in).Phase; got != tc.want {
			t.Errorf("%s: phase = %s, want %s", tc.name, got, tc.want)
		}
	}
	// A terminal phase never goes back.
	in := input(statusPod(corev1.RestartPolicyAlways))
	in.old.Phase = corev1.PodSucceeded
	if computeStatus(in).Phase != corev1.PodSucceeded {
		t.Fatal("terminal phase moved back")
	}
}

func TestReadinessGates(t *testing.T) {
	pod := statusPod(corev1.RestartPolicyAlways)
	pod.Spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: "example.com/lb"}}
	in := input(pod, ctr("app", 0, runningSt), ctr("side", 0, runningSt))
	r := findCondition(computeStatus(in).Conditions, corev1.PodReady)
	if r.Status != corev1.ConditionFalse || r.Reason != "ReadinessGatesNotReady" || !strings.Contains(r.Message, "does not exist") {
		t.Fatalf("Ready without the gate = %+v", r)
	}
	pod.Status.Conditions = []corev1.PodCondition{{Type: "example.com/lb", Status: corev1.ConditionTrue}}
	if r := findCondition(computeStatus(in).Conditions, corev1.PodReady); r.Status != corev1.ConditionTrue {
		t.Fatalf("Ready with the gate = %+v", r)
	}
}

func TestQOSClass(t *testing.T) {
	rl := func(cpu, mem string) corev1.ResourceList {
		l := corev1.ResourceList{}
		if cpu != "" {
			l[corev1.ResourceCPU] = resource.MustParse(cpu)
		}
		if mem != "" {
			l[corev1.ResourceMemory] = resource.MustParse(mem)
		}
		return l
	}
	spec := func(req, lim corev1.ResourceList) *corev1.PodSpec {
		return &corev1.PodSpec{Containers: []corev1.Container{{Resources: corev1.ResourceRequirements{Requests: req, Limits: lim}}}}
	}
	for _, tc := range []struct {
		spec *corev1.PodSpec
		want corev1.PodQOSClass
	}{
		{spec(nil, nil), corev1.PodQOSBestEffort},
		{spec(rl("1", "1Gi"), rl("1", "1Gi")), corev1.PodQOSGuaranteed},
		{spec(rl("500m", "1Gi"), rl("1", "1Gi")), corev1.PodQOSBurstable},
		{spec(nil, rl("", "1Gi")), corev1.PodQOSBurstable},
	} {
		if got := qosClass(tc.spec); got != tc.want {
			t.Errorf("%+v: %s, want %s", tc.spec.Containers[0].Resources, got, tc.want)
		}
	}
}

func TestDNSConfig(t *testing.T) {
	k := &Kubelet{cfg: Config{ClusterDNS: []string{"10.43.0.10"}, ClusterDomain: "cluster.local"}}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop"}}
	got := k.dnsConfig(pod)
	want := &runtime.DNSConfig{Servers: []string{"10.43.0.10"}, Searches: []string{"shop.svc.cluster.local", "svc.cluster.local", "cluster.local"}, Options: []string{"ndots:5"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("ClusterFirst = %+v", got)
	}
	two := "2"
	pod.Spec.DNSConfig = &corev1.PodDNSConfig{Nameservers: []string{"1.1.1.1"}, Searches: []string{"corp.example"}, Options: []corev1.PodDNSConfigOption{{Name: "ndots", Value: &two}, {Name: "edns0"}}}
	got = k.dnsConfig(pod)
	if !reflect.DeepEqual(got.Options, []string{"ndots:2", "edns0"}) || got.Servers[1] != "1.1.1.1" || got.Searches[3] != "corp.example" {
		t.Fatalf("with dnsConfig = %+v", got)
	}
	pod.Spec.DNSConfig = nil
	pod.Spec.HostNetwork = true
	if got := k.dnsConfig(pod); got != nil {
		t.Fatalf("hostNetwork ClusterFirst uses the device's resolv.conf, got %+v", got)
	}
	pod.Spec.DNSPolicy = corev1.DNSClusterFirstWithHostNet
	if got := k.dnsConfig(pod); got == nil || got.Servers[0] != "10.43.0.10" {
		t.Fatalf("ClusterFirstWithHostNet = %+v", got)
	}
	pod.Spec.DNSPolicy = corev1.DNSNone
	pod.Spec.DNSConfig = &corev1.PodDNSConfig{Nameservers: []string{"9.9.9.9"}}
	if got := k.dnsConfig(pod); !reflect.DeepEqual(got, &runtime.DNSConfig{Servers: []string{"9.9.9.9"}}) {
		t.Fatalf("None = %+v", got)
	}
	// No cluster DNS configured: the device's resolv.conf.
	k.cfg.ClusterDNS = nil
	if got := k.dnsConfig(&corev1.Pod{}); got != nil {
		t.Fatalf("without cluster DNS = %+v", got)
	}
	resolv := filepath.Join(t.TempDir(), "resolv.conf")
	os.WriteFile(resolv, []byte("# comment\nnameserver 192.168.1.1\nsearch lan home\noptions rotate\n"), 0o644)
	if got := hostResolvConf(resolv); !reflect.DeepEqual(got, runtime.DNSConfig{Servers: []string{"192.168.1.1"}, Searches: []string{"lan", "home"}, Options: []string{"rotate"}}) {
		t.Fatalf("host resolv.conf = %+v", got)
	}
}

func i64(v int64) *int64 { return &v }
func bptr(v bool) *bool  { return &v }

func TestApplySecurity(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"}, Spec: corev1.PodSpec{SecurityContext: &corev1.PodSecurityContext{
		RunAsUser: i64(1000), RunAsGroup: i64(2000), FSGroup: i64(3000), SupplementalGroups: []int64{4000}}}}
	c := &corev1.Container{Name: "app", Image: "img", SecurityContext: &corev1.SecurityContext{
		RunAsUser: i64(1001), ReadOnlyRootFilesystem: bptr(true), AllowPrivilegeEscalation: bptr(false),
		Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"NET_ADMIN"}, Drop: []corev1.Capability{"ALL"}}}}
	var cfg runtime.ContainerConfig
	if err := applySecurity(&cfg, pod, c, ocispec.ImageConfig{}); err != nil {
		t.Fatal(err)
	}
	if cfg.User == nil || cfg.User.UID != 1001 || cfg.User.GID != 2000 || !reflect.DeepEqual(cfg.User.AdditionalGIDs, []uint32{3000, 4000}) {
		t.Fatalf("user = %+v", cfg.User)
	}
	if !cfg.ReadOnlyRootfs || !cfg.NoNewPrivileges || cfg.Privileged || !reflect.DeepEqual(cfg.CapAdd, []string{"NET_ADMIN"}) || !reflect.DeepEqual(cfg.CapDrop, []string{"ALL"}) {
		t.Fatalf("cfg = %+v", cfg)
	}

	// No override: the image's user stays.
	cfg = runtime.ContainerConfig{}
	if err := applySecurity(&cfg, &corev1.Pod{}, &corev1.Container{}, ocispec.ImageConfig{User: "nobody"}); err != nil || cfg.User != nil {
		t.Fatalf("no securityContext: %+v %v", cfg.User, err)
	}
	// runAsNonRoot is checked against what will run.
	nonRoot := func(img string, uid *int64) error {
		c := &corev1.Container{Name: "app", SecurityContext: &corev1.SecurityContext{RunAsNonRoot: bptr(true), RunAsUser: uid}}
		return applySecurity(&runtime.ContainerConfig{}, pod0(), c, ocispec.ImageConfig{User: img})
	}
	if err := nonRoot("", nil); err == nil || !strings.Contains(err.Error(), "image will run as root") {
		t.Errorf("root image: %v", err)
	}
	if err := nonRoot("app", nil); err == nil || !strings.Contains(err.Error(), "non-numeric user (app)") {
		t.Errorf("named user: %v", err)
	}
	if err := nonRoot("", i64(0)); err == nil {
		t.Error("runAsUser 0 accepted under runAsNonRoot")
	}
	if err := nonRoot("1000:1000", nil); err != nil {
		t.Errorf("numeric non-root image user: %v", err)
	}
	if err := nonRoot("", i64(1000)); err != nil {
		t.Errorf("runAsUser 1000: %v", err)
	}
	if uid, gid, ok := parseImageUser("12:34"); uid != 12 || gid != 34 || !ok {
		t.Error("parseImageUser")
	}
}

func pod0() *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"}}
}

func TestHostPortsAndRefs(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns"}, Spec: corev1.PodSpec{
		Containers: []corev1.Container{{
			Ports:   []corev1.ContainerPort{{ContainerPort: 80, HostPort: 8080}, {ContainerPort: 53, HostPort: 5353, Protocol: corev1.ProtocolUDP}, {ContainerPort: 9000}},
			Env:     []corev1.EnvVar{{Name: "X", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "s1"}, Key: "k"}}}},
			EnvFrom: []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "c1"}}}},
		}},
		Volumes: []corev1.Volume{
			{VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "c2"}}}},
			{VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{{Secret: &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "s2"}}}}}}},
		},
	}}
	want := []cni.PortMapping{{HostPort: 8080, ContainerPort: 80, Protocol: "tcp"}, {HostPort: 5353, ContainerPort: 53, Protocol: "udp"}}
	if got := hostPorts(pod); !reflect.DeepEqual(got, want) {
		t.Fatalf("hostPorts = %+v", got)
	}
	refs := podRefs(pod)
	for _, k := range []objKey{{"secrets", "ns", "s1"}, {"configmaps", "ns", "c1"}, {"configmaps", "ns", "c2"}, {"secrets", "ns", "s2"}} {
		if !refs[k] {
			t.Errorf("refs lack %v", k)
		}
	}
	if len(refs) != 4 {
		t.Errorf("refs = %v", refs)
	}
	long := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: strings.Repeat("a", 62) + "-b"}}
	if h := hostname(long); len(h) > 63 || strings.HasSuffix(h, "-") {
		t.Errorf("hostname = %q", h)
	}
}

func TestConfigDefaults(t *testing.T) {
	if _, err := (Config{}).withDefaults(); err == nil || !strings.Contains(err.Error(), "NodeName is required") {
		t.Fatalf("empty config: %v", err)
	}
	if _, err := New(Config{NodeName: "n"}); err == nil {
		t.Fatal("New accepted a config without client, runtime and puller")
	}
	b := Backoff{Initial: time.Minute}.or(10*time.Second, 5*time.Minute, 0)
	if b.Initial != time.Minute || b.Max != 5*time.Minute {
		t.Fatalf("backoff defaults = %+v", b)
	}
}
