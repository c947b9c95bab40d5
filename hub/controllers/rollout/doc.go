// Package rollout owns the rollout loop of RolloutPolicies (issue 16): for
// each DaemonSet and Deployment a policy selects, it records the revision being rolled
// out and the one devices fall back to, admits the policy's waves one at a
// time as each meets the success criteria, and on a failed wave holds the
// rollout (Pause) or sends the wave's devices back (Rollback) — in the
// policy's status, never in the DaemonSet, whose spec stays as Git says.
// A failed wave is judged again when the workload's retry annotation
// (flotctl rollout retry) carries a value the status has not answered.
//
// The DaemonSet loop reads that status through Gate: a device in an
// admitted wave gets the new template, any other keeps (or is given) the
// previous ControllerRevision's. Both loops compute waves with package
// waves, from the same policy and nodes, so they agree on every device.
//
// For Deployments, DeploymentGate answers from the same status: the
// Deployment loop scales the new ReplicaSet only to what the devices of
// admitted waves hold, and the scheduler binds the new template's pods only
// to those devices and the previous revision's only to the others. A
// Deployment's wave is judged on the devices of the wave that run one of
// its pods.
package rollout
