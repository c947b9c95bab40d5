// Package simdevice simulates Flotilla devices for tests and benchmarks.
// A Device registers its Node (labels, taints, capacity, Ready), renews
// its Lease in kube-node-lease, and runs the real kubelet (package
// agent/kubelet) on the in-memory fakes of package kubelettest: the
// pods bound to it are started, probed, made Ready, restarted and
// deleted by the agent's own state machine and status manager, and
// their statuses and Events reach the hub as a device's do. Nothing runs
// for real:
//
//   - containers live in a fake runtime: starting one takes
//     Config.ReadyDelay, then it runs until the kubelet stops it; the
//     containers of Config.NeverReady pods exit with code 1 as soon as
//     they have started (CrashLoopBackOff, never Ready); exec probes and
//     hooks succeed;
//   - any image pulls at once;
//   - pods get addresses from the Node's pod CIDR (10.244.0.0/16 if it
//     has none when the first pod starts) on a fake network;
//   - httpGet, tcpSocket and grpc probes and hooks are answered in
//     memory (200 "ok", SERVING) for the device's pods and HostIP, and
//     refused elsewhere: no packet leaves the process;
//   - pod directories, volumes and hostPath volumes live in a temporary
//     directory per Run, removed when it returns (a hostPath that must
//     already exist therefore does not).
//
// It exercises the hub's loops against real agent behaviour, not
// containerd, CNI or the network.
package simdevice
