package agentbench

import (
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

func TestParseCRIConfig(t *testing.T) {
	for _, c := range []struct {
		name, raw string
		want      criConfig
	}{
		{"containerd 1.6, cgroupfs", `{"containerd":{"defaultRuntimeName":"runc","runtimes":{"runc":{"runtimeType":"io.containerd.runc.v2","options":{"SystemdCgroup":false}}}},"sandboxImage":"registry.k8s.io/pause:3.6","systemdCgroup":false}`,
			criConfig{sandboxImage: "registry.k8s.io/pause:3.6", cgroupDriver: "cgroupfs"}},
		{"containerd 1.6, systemd for the default runtime", `{"containerd":{"defaultRuntimeName":"crun","runtimes":{"runc":{"options":{"SystemdCgroup":false}},"crun":{"options":{"SystemdCgroup":true}}}},"sandboxImage":"k8s.gcr.io/pause:3.5"}`,
			criConfig{sandboxImage: "k8s.gcr.io/pause:3.5", cgroupDriver: "systemd"}},
		{"containerd 2", `{"pinnedImages":{"sandbox":"registry.k8s.io/pause:3.10"},"containerd":{"defaultRuntimeName":"runc"}}`,
			criConfig{sandboxImage: "registry.k8s.io/pause:3.10", cgroupDriver: "cgroupfs"}},
	} {
		got, err := parseCRIConfig(c.raw)
		if err != nil || got != c.want {
			t.Errorf("%s: parseCRIConfig = %+v, %v; want %+v", c.name, got, err, c.want)
		}
	}
	for _, raw := range []string{"", "{", `{"containerd":{}}`} {
		if _, err := parseCRIConfig(raw); err == nil {
			t.Errorf("parseCRIConfig(%q) took it", raw)
		}
	}
}

// TestNewChainCleanup removes only the KUBE-* chains that were not there
// before and the rules of other chains that jump to them.
func TestNewChainCleanup(t *testing.T) {
	rules := strings.Split(`-P INPUT ACCEPT
-P OUTPUT ACCEPT
-N KUBE-FIREWALL
-N KUBE-KUBELET-CANARY
-N KUBE-OLD
-N OTHER
-A INPUT -j KUBE-FIREWALL
-A INPUT -j KUBE-OLD
-A OUTPUT -j KUBE-FIREWALL
-A OTHER -p tcp -g KUBE-KUBELET-CANARY
-A KUBE-FIREWALL ! -s 127.0.0.0/8 -d 127.0.0.0/8 -m comment --comment "block incoming localnet connections" -j DROP`, "\n")
	jumps, chains := newChainCleanup(map[string]bool{"KUBE-OLD": true}, rules)
	if want := []string{"KUBE-FIREWALL", "KUBE-KUBELET-CANARY"}; !reflect.DeepEqual(chains, want) {
		t.Errorf("chains = %q, want %q", chains, want)
	}
	wantJumps := [][]string{{"-D", "INPUT", "-j", "KUBE-FIREWALL"}, {"-D", "OUTPUT", "-j", "KUBE-FIREWALL"}, {"-D", "OTHER", "-p", "tcp", "-g", "KUBE-KUBELET-CANARY"}}
	if !reflect.DeepEqual(jumps, wantJumps) {
		t.Errorf("jumps = %q\nwant %q", jumps, wantJumps)
	}
}

// TestKubeletConfig keeps the kubelet on loopback, its own dirs and the
// CRI plugin's cgroup driver, and off what it would change on the machine.
func TestKubeletConfig(t *testing.T) {
	raw := kubeletConfig(kubeletConfigParams{StaticPodPath: "/tmp/x/manifests", PodLogsDir: "/tmp/x/pod-logs",
		CgroupDriver: "cgroupfs", Endpoint: "unix:///run/containerd/containerd.sock", Port: 41001, HealthzPort: 41002})
	var cfg map[string]any
	if err := yaml.Unmarshal([]byte(raw), &cfg); err != nil {
		t.Fatalf("%v\n%s", err, raw)
	}
	for k, want := range map[string]any{
		"kind": "KubeletConfiguration", "staticPodPath": "/tmp/x/manifests", "podLogsDir": "/tmp/x/pod-logs",
		"cgroupDriver": "cgroupfs", "containerRuntimeEndpoint": "unix:///run/containerd/containerd.sock",
		"address": "127.0.0.1", "port": float64(41001), "healthzBindAddress": "127.0.0.1", "healthzPort": float64(41002),
		"readOnlyPort": float64(0), "cgroupsPerQOS": false, "failCgroupV1": false, "imageGCHighThresholdPercent": float64(100),
	} {
		if !reflect.DeepEqual(cfg[k], want) {
			t.Errorf("%s = %#v, want %#v", k, cfg[k], want)
		}
	}
	if a := cfg["authentication"].(map[string]any)["anonymous"].(map[string]any)["enabled"]; a != false {
		t.Errorf("anonymous authentication = %v", a)
	}
	for signal, v := range cfg["evictionHard"].(map[string]any) {
		if v != "0%" {
			t.Errorf("evictionHard %s = %v, want 0%% (off)", signal, v)
		}
	}
}

func TestStaticPod(t *testing.T) {
	var pod corev1.Pod
	if err := yaml.UnmarshalStrict([]byte(staticPod("load-3", "flotilla-bench-kubelet-x", "127.0.0.1:5000/testapp@sha256:ab", "127.0.0.1:41003")), &pod); err != nil {
		t.Fatal(err)
	}
	c := pod.Spec.Containers[0]
	if pod.Name != "load-3" || pod.Namespace != "flotilla-bench-kubelet-x" || !pod.Spec.HostNetwork ||
		c.Image != "127.0.0.1:5000/testapp@sha256:ab" || c.ImagePullPolicy != corev1.PullNever {
		t.Errorf("pod = %+v", pod)
	}
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	if env["LISTEN"] != "127.0.0.1:41003" || env["DRAIN_DELAY"] != "0s" {
		t.Errorf("env = %v", env)
	}
}

// TestSandboxOOMScoreProblem names the missing capability only where the
// CRI plugin does not clamp its sandboxes' OOM score.
func TestSandboxOOMScoreProblem(t *testing.T) {
	without := "Name:\tx\nCapBnd:\t000001fffeffffff\n"
	with := "Name:\tx\nCapBnd:\t000001ffffffffff\n"
	if p := sandboxOOMScoreProblem(criConfig{}, without); !strings.Contains(p, "CAP_SYS_RESOURCE") || !strings.Contains(p, "restrict_oom_score_adj") {
		t.Errorf("without CAP_SYS_RESOURCE: %q", p)
	}
	if p := sandboxOOMScoreProblem(criConfig{}, with); p != "" {
		t.Errorf("with CAP_SYS_RESOURCE: %q", p)
	}
	if p := sandboxOOMScoreProblem(criConfig{restrictOOMScoreAdj: true}, without); p != "" {
		t.Errorf("restricted by the plugin's config: %q", p)
	}
}
