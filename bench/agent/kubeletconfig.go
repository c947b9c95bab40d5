package agentbench

import (
	"fmt"
	"strconv"
)

// kubeletConfigParams are what differs between runs of the kubelet.
type kubeletConfigParams struct {
	StaticPodPath, PodLogsDir, CgroupDriver, Endpoint string
	Port, HealthzPort                                 int
}

// kubeletConfig is the KubeletConfiguration of a standalone kubelet that
// keeps to loopback and its own dirs, runs on cgroup v1 (which the
// kubelet refuses by default since 1.35) and leaves the machine's cgroups,
// images and pods alone: no QoS cgroups (they would outlive it), no
// eviction and no image garbage collection (this machine's disk is fuller
// than their defaults allow, and either would remove images that are not
// the run's), no read-only port, no anonymous or unauthenticated access to
// its API.
func kubeletConfig(p kubeletConfigParams) string {
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
staticPodPath: %s
podLogsDir: %s
containerRuntimeEndpoint: %s
cgroupDriver: %s
cgroupsPerQOS: false
failCgroupV1: false
enforceNodeAllocatable: []
address: 127.0.0.1
port: %d
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: %d
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: false
authorization:
  mode: AlwaysAllow
failSwapOn: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: "0%%"
  nodefs.available: "0%%"
  nodefs.inodesFree: "0%%"
  imagefs.available: "0%%"
  imagefs.inodesFree: "0%%"
`, strconv.Quote(p.StaticPodPath), strconv.Quote(p.PodLogsDir), strconv.Quote(p.Endpoint), p.CgroupDriver, p.Port, p.HealthzPort)
}

// staticPod is the test app as the agent's pods run it (the same image,
// POD_NAME from the downward API, no drain delay), on the host's network:
// containerd's CRI plugin here has no CNI config, and the machine's is not
// the bench's to change. Each pod listens on its own loopback port.
func staticPod(name, namespace, image, listen string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %s
  namespace: %s
spec:
  hostNetwork: true
  terminationGracePeriodSeconds: 5
  containers:
  - name: app
    image: %s
    imagePullPolicy: Never
    env:
    - name: POD_NAME
      valueFrom:
        fieldRef:
          fieldPath: metadata.name
    - name: DRAIN_DELAY
      value: 0s
    - name: LISTEN
      value: %s
`, name, namespace, strconv.Quote(image), strconv.Quote(listen))
}
