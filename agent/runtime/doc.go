// Package runtime is the containerd side of pods on a device: sandboxes,
// containers, tasks, exec, exit and OOM status, and adoption after an
// agent restart. It knows nothing of the hub or of Kubernetes objects; the
// kubelet turns pods into the small structs here.
//
// # Sandboxes without a pause process
//
// Flotilla has no pause image. A pod's sandbox is a directory under
// RunDir/sandboxes/<pod-uid> holding:
//
//   - net, ipc, uts: the pod's network, IPC and UTS namespaces, created by
//     a thread that unshares them and bind-mounts their nsfs files there
//     (package podns). The bind mounts keep the namespaces alive with no
//     process in them; every container of the pod joins them by path in
//     its OCI spec, so containers can start, crash and restart in any order
//     and the pod IP stays put. The hostname is set once, in the UTS
//     namespace.
//   - shm: a tmpfs mounted on /dev/shm of every container, so POSIX shared
//     memory is shared like the SysV IPC namespace is.
//   - hostname, hosts, resolv.conf: bind-mounted onto /etc in containers.
//   - sandbox.json: the pod's identity and labels (uid, namespace, name),
//     its IP once networking is set up, so a restarted agent finds it.
//
// Each container has its own PID and mount namespaces. A hostNetwork pod's
// sandbox has no net namespace; its containers use the host's.
//
// Sandboxes live in RunDir (a tmpfs under /run by default) because the
// namespaces they hold do not survive a reboot either; container records
// in containerd do, and a kubelet seeing containers without a sandbox
// after a reboot recreates the sandbox.
//
// # Containers and their state
//
// Every container carries labels (LabelPodUID, LabelPodNamespace,
// LabelPodName, LabelContainerName, LabelAttempt) in the runtime's
// containerd namespace, so ListContainers rebuilds the full picture after
// an agent restart, and running tasks are adopted, not restarted. When a
// task exits, its exit code, finish time and whether the kernel OOM-killed
// it (read from the container's memory cgroup before the task is deleted,
// and from containerd's OOM event) are recorded as labels and the task is
// deleted, which frees its shim while keeping the container's last state
// for the pod status and `logs --previous`.
//
// Logs go through flotilla-logger (package logdriver), containerd's binary
// log driver, to LogDir/<namespace>_<pod>_<uid>/<container>/<attempt>.log
// in the CRI format; the shim owns the logger, so logging does not depend
// on the agent being up.
//
// # Interactive containers
//
// containerd's binary log driver gives a process no stdin, so a container
// started with Stdin or TTY (a pod spec's stdin: true, tty: true) gets
// FIFOs instead, in RunDir/io/<container-id>: stdin, and stdout and
// stderr (or the terminal's one output), held by the runtime. Their
// output is copied to the same log file in the same format and to the
// sessions Attach joins; stdin stays open between sessions because the
// shim holds the FIFO's write end too, until a StdinOnce container's
// first session ends (CloseIO, recorded as a label). A restarted agent
// reopens the FIFOs of running interactive containers when it first reads
// their status; meanwhile their output waits in the pipes, so such a
// container that writes more than a pipe holds waits for the agent.
package runtime
