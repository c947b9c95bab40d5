// Package scheduling owns what decides whether a pod may go to a node by
// the node's own properties: taints and tolerations, the nodeSelector and
// required node affinity, with Kubernetes' rules. The scheduler, the
// DaemonSet controller (which must agree with it on eligible devices) and
// the node lifecycle controller (which evicts what does not tolerate an
// unreachable device) all ask it; what depends on other pods (resources,
// host ports, spreading) stays with the scheduler. It also holds
// Kubernetes' priority figures and the built-in PriorityClasses, which the
// hub's admission and the scheduler's preemption share.
package scheduling
