// Package agentbench measures the device agent for `make bench`: how fast
// a pod starts when its image is already on the device, beside the same
// container started with the bare containerd client, and how much memory
// the agent process holds idle and with 20 pods.
//
// It runs the real flotilla-agent binary (from $FLOTILLA_BIN, else built
// into a temporary directory) as one device: in a network namespace it
// creates, joined to an in-process hub with a node certificate the hub's
// CA issues, on the machine's containerd in a containerd namespace of its
// own. The device reaches the hub, which listens on the host's loopback,
// through a TCP relay whose listening socket lives in the device's
// namespace, so nothing in the host's network is touched. The test image
// is built from test/testapp, pushed to a docker-registry the driver
// starts on loopback, and pulled into containerd before the agent starts.
//
// Memory is the agent process's own (VmRSS in /proc/PID/status; the
// containerd shims and flotilla-logger processes of its pods are not the
// agent), with the Go runtime's view of it read from the agent's /metrics.
//
// Everything it creates is removed before Run returns: pods, the agent
// process, containerd namespaces (containers, snapshots, images, cgroups),
// the network namespace, the registry and the temporary directories.
// Needs root, containerd, runc, the CNI plugins and docker-registry.
//
// RunKubelet measures the upstream kubelet (bench/kubebuild builds it) the
// same way, beside the agent: standalone, with static pods of the same
// test image from a directory, on containerd's CRI plugin. Its images go
// into the plugin's k8s.io namespace, with a pause image built here (from
// ./pause) under the sandbox image's name the plugin's config gives. What
// it creates is removed before it returns too: the pods (their manifests,
// then their sandboxes through the CRI API), the images it added, the
// kubelet's dirs and mounts, and what the kubelet changes on the host:
// the KUBE-* iptables chains that were not there before, the kernel
// settings it sets at start, /var/lib/kubelet (its device plugin socket)
// and /var/log/containers when they did not exist.
package agentbench
