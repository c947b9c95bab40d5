// Package kubelettest has in-memory fakes of what the kubelet runs pods
// on: Runtime (containerd, package runtime), Network (CNI, package cni)
// and Images (the registry puller). With them a real kubelet.Kubelet runs
// without root, containerd or a network, so its state machine (init
// order, restarts and CrashLoopBackOff, restart policies, sidecars,
// termination, orphans, image pull errors) can be unit tested, and a
// simulated device can run many kubelets in one process.
//
// The fakes behave like the real implementations where the kubelet
// depends on them:
//
//   - a sandbox's ID is its pod's UID; GetSandbox and ContainerStatus
//     return errors wrapping runtime.ErrNotFound for what does not exist;
//     a sandbox made by the fake is Ready (its namespace paths are the
//     test process's own, in /proc/self/ns) until SetSandboxReady says
//     otherwise;
//   - a container's ID is runtime.ContainerID(pod UID, name, attempt);
//     it is Created by CreateContainer, Running after StartContainer and
//     Exited after StopContainer or the test's Exit, Kill or OOMKill, with
//     the exit code, reason and times the real runtime records; starts,
//     exits and OOM kills are delivered to Watch subscribers;
//   - ListContainers sorts by pod UID, name and attempt, as the real one
//     does.
//
// Nothing happens on its own: a container runs until the test ends it
// (or an OnStart hook does), and StopContainer ends it at once, recording
// the grace period it was given.
//
// Every fake counts calls by method name (Calls) and takes injected
// errors: FailNext queues an error for the next call of a method,
// FailAlways makes every call fail until cleared. All methods are safe
// for concurrent use.
package kubelettest
