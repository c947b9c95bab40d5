// Package kubelet makes the pods bound to this device real: it is the
// agent's pod lifecycle, after Kubernetes' kubelet, on containerd
// (package runtime) and CNI (package cni).
//
// # Desired and actual state
//
// Desired pods come from PodSources, merged: HubSource (an informer on
// the hub's pods with spec.nodeName=<node>) first, then any others the
// agent adds (static pods, the local cache for offline autonomy). Actual
// state is read from containerd every time: sandboxes and containers
// carry the pod's UID, name and the container attempt in their labels,
// so a restarted agent adopts what runs instead of restarting it.
//
// # Pod workers
//
// Each pod UID has one worker goroutine with a one-slot, deduplicating
// poke channel: informer events, containerd events (start, exit, OOM),
// probe result changes and ConfigMap/Secret changes poke it, and a timer
// brings it back at least every ResyncInterval or when a backoff ends.
// A sync is level-triggered: it reads desired and actual and takes the
// steps between them:
//
//   - sandbox: runtime.CreateSandbox, then CNI Setup in the device's
//     network namespace (with hostPort mappings) and SetSandboxIP;
//   - volumes (package volumes), kept current on every sync;
//   - init containers in order, each to completion (a sidecar, with
//     restartPolicy Always, only until it has started, and it then runs
//     beside the app), then app containers;
//     for each: pull by digest with pull Events and ImagePullBackOff, the
//     env and argv (package envvars), mounts, resources, securityContext,
//     create, start, postStart;
//   - restarts by restartPolicy with the CrashLoopBackOff (10 s doubling
//     to 5 min, reset after 10 min of running), and kills on liveness or
//     startup probe failure (package probes);
//   - the status, computed from all of the above and written by the
//     status manager (package status) only when it changed.
//
// A pod with a deletionTimestamp is terminated: preStop hooks, the stop
// signal, SIGKILL when the grace period ends, CNI teardown, sandbox and
// volumes removed, and then the pod is deleted on the hub with grace 0
// and a UID precondition. A pod no source has any more (deleted,
// force-deleted, moved, or found in containerd after a restart once every
// source has synced) is stopped the same way. A finished pod (Succeeded
// or Failed) releases its network, sandbox and volumes but keeps its
// containers' records for its status and logs.
//
// Bad input (a missing ConfigMap key, an image that does not exist, a
// command missing from the image, a volume that cannot be mounted) never
// stops the agent or other pods: the container waits with the reason
// Kubernetes gives (CreateContainerConfigError, ErrImagePull then
// ImagePullBackOff, RunContainerError then CrashLoopBackOff, or the pod
// stays ContainerCreating with a FailedMount Event), an Event says why,
// and the pod is retried with backoff.
package kubelet
