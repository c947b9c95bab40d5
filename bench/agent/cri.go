package agentbench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	containerd "github.com/containerd/containerd/v2/client"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	cri "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// podNamespaceLabel is the label the kubelet puts on a pod's sandbox and
// containers with the pod's namespace.
const podNamespaceLabel = "io.kubernetes.pod.namespace"

// ErrNoCRI is containerd without its CRI plugin: the kubelet has nothing
// to run pods on.
var ErrNoCRI = errors.New("containerd's CRI plugin is not running")

// criPluginEnabled checks that containerd loaded its CRI plugin, and says
// what keeps it off when it did not.
func criPluginEnabled(ctx context.Context, c *containerd.Client) error {
	resp, err := c.IntrospectionService().Plugins(ctx, `type=="io.containerd.grpc.v1",id=="cri"`)
	if err != nil {
		return fmt.Errorf("listing containerd's plugins: %w", err)
	}
	for _, p := range resp.Plugins {
		if p.InitErr == nil {
			return nil
		}
		return fmt.Errorf("%w: it failed to start: %s (see containerd's log)", ErrNoCRI, p.InitErr.Message)
	}
	return fmt.Errorf("%w: containerd's config disables it (disabled_plugins in /etc/containerd/config.toml lists \"cri\"); the kubelet needs it removed from there and containerd restarted, which this bench does not do", ErrNoCRI)
}

// criClient talks to containerd's CRI plugin as the kubelet does.
type criClient struct {
	conn *grpc.ClientConn
	rt   cri.RuntimeServiceClient
}

func dialCRI(socket string) (*criClient, error) {
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("the CRI at %s: %w", socket, err)
	}
	return &criClient{conn: conn, rt: cri.NewRuntimeServiceClient(conn)}, nil
}

func (c *criClient) close() { c.conn.Close() }

// criConfig is what the kubelet must agree with the CRI plugin on.
type criConfig struct {
	sandboxImage string
	// cgroupDriver is "systemd" or "cgroupfs".
	cgroupDriver string
	// restrictOOMScoreAdj says the plugin clamps the OOM score
	// adjustments it asks for (-998 for every sandbox) to containerd's
	// own.
	restrictOOMScoreAdj bool
}

// config reads the sandbox image and the cgroup driver from the CRI
// plugin: the driver from RuntimeConfig where the plugin has it
// (containerd 2), else from the runc options of its config (as `crictl
// info` prints it), which is where the kubelet's --cgroup-driver must
// match it.
func (c *criClient) config(ctx context.Context) (criConfig, error) {
	st, err := c.rt.Status(ctx, &cri.StatusRequest{Verbose: true})
	if err != nil {
		return criConfig{}, fmt.Errorf("the CRI plugin's status: %w", err)
	}
	cfg, err := parseCRIConfig(st.GetInfo()["config"])
	if err != nil {
		return criConfig{}, err
	}
	rc, err := c.rt.RuntimeConfig(ctx, &cri.RuntimeConfigRequest{})
	switch {
	case err == nil && rc.GetLinux() != nil:
		cfg.cgroupDriver = "cgroupfs"
		if rc.GetLinux().GetCgroupDriver() == cri.CgroupDriver_SYSTEMD {
			cfg.cgroupDriver = "systemd"
		}
	case err != nil && status.Code(err) != codes.Unimplemented:
		return criConfig{}, fmt.Errorf("the CRI plugin's runtime config: %w", err)
	}
	return cfg, nil
}

// parseCRIConfig reads the config of the CRI plugin's verbose status: the
// sandbox image (containerd 1.x: sandboxImage; 2.x: pinnedImages.sandbox)
// and whether the default runtime uses systemd's cgroups.
func parseCRIConfig(raw string) (criConfig, error) {
	if raw == "" {
		return criConfig{}, errors.New("the CRI plugin's status has no config")
	}
	var c struct {
		SandboxImage string `json:"sandboxImage"`
		PinnedImages struct {
			Sandbox string `json:"sandbox"`
		} `json:"pinnedImages"`
		SystemdCgroup       bool `json:"systemdCgroup"`
		RestrictOOMScoreAdj bool `json:"restrictOOMScoreAdj"`
		Containerd          struct {
			DefaultRuntimeName string `json:"defaultRuntimeName"`
			Runtimes           map[string]struct {
				Options map[string]any `json:"options"`
			} `json:"runtimes"`
		} `json:"containerd"`
	}
	if err := json.Unmarshal([]byte(raw), &c); err != nil {
		return criConfig{}, fmt.Errorf("the CRI plugin's config: %w", err)
	}
	out := criConfig{sandboxImage: c.SandboxImage, cgroupDriver: "cgroupfs", restrictOOMScoreAdj: c.RestrictOOMScoreAdj}
	if out.sandboxImage == "" {
		out.sandboxImage = c.PinnedImages.Sandbox
	}
	if out.sandboxImage == "" {
		return criConfig{}, errors.New("the CRI plugin's config names no sandbox image")
	}
	systemd, _ := c.Containerd.Runtimes[c.Containerd.DefaultRuntimeName].Options["SystemdCgroup"].(bool)
	if systemd || c.SystemdCgroup {
		out.cgroupDriver = "systemd"
	}
	return out, nil
}

// runningContainers counts the running containers of pods in namespace.
func (c *criClient) runningContainers(ctx context.Context, namespace string) (int, error) {
	resp, err := c.rt.ListContainers(ctx, &cri.ListContainersRequest{Filter: &cri.ContainerFilter{
		State:         &cri.ContainerStateValue{State: cri.ContainerState_CONTAINER_RUNNING},
		LabelSelector: map[string]string{podNamespaceLabel: namespace},
	}})
	if err != nil {
		return 0, fmt.Errorf("the CRI plugin's containers: %w", err)
	}
	return len(resp.GetContainers()), nil
}

// removeSandboxes stops and removes the sandboxes of pods in namespace,
// with their containers.
func (c *criClient) removeSandboxes(ctx context.Context, namespace string) error {
	resp, err := c.rt.ListPodSandbox(ctx, &cri.ListPodSandboxRequest{Filter: &cri.PodSandboxFilter{
		LabelSelector: map[string]string{podNamespaceLabel: namespace},
	}})
	if err != nil {
		return fmt.Errorf("the CRI plugin's sandboxes: %w", err)
	}
	var errs []error
	for _, sb := range resp.GetItems() {
		if _, err := c.rt.StopPodSandbox(ctx, &cri.StopPodSandboxRequest{PodSandboxId: sb.GetId()}); err != nil {
			errs = append(errs, fmt.Errorf("stop sandbox %s: %w", sb.GetId(), err))
		}
		if _, err := c.rt.RemovePodSandbox(ctx, &cri.RemovePodSandboxRequest{PodSandboxId: sb.GetId()}); err != nil {
			errs = append(errs, fmt.Errorf("remove sandbox %s: %w", sb.GetId(), err))
		}
	}
	return errors.Join(errs...)
}

// capSysResource is the capability a process needs to lower an OOM score
// adjustment below what it has.
const capSysResource = 24

// sandboxOOMScoreProblem says why the CRI plugin's pod sandboxes cannot
// start on this machine, "" when they can: the plugin asks runc for an
// OOM score adjustment of -998 for each, which needs CAP_SYS_RESOURCE,
// unless its config clamps it (restrict_oom_score_adj). capStatus is
// /proc/self/status.
func sandboxOOMScoreProblem(cfg criConfig, capStatus string) string {
	if cfg.restrictOOMScoreAdj {
		return ""
	}
	for _, line := range strings.Split(capStatus, "\n") {
		v, ok := strings.CutPrefix(line, "CapBnd:")
		if !ok {
			continue
		}
		caps, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		if err != nil || caps&(1<<capSysResource) != 0 {
			return ""
		}
		return "every pod sandbox fails to start here: containerd's CRI plugin gives each an OOM score adjustment of -998, " +
			"and runc cannot set it (\"failed to update /proc/self/oom_score_adj: Permission denied\", RunPodSandbox: " +
			"\"can't get final child's PID from pipe: EOF\") because CAP_SYS_RESOURCE is not in this machine's capability bounding set " +
			"(CapBnd " + strings.TrimSpace(v) + "); restrict_oom_score_adj = true in the plugin's section of /etc/containerd/config.toml " +
			"would clamp it, which this bench does not change"
	}
	return ""
}
