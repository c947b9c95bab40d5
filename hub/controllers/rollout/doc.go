// Package rollout owns the rollout loop of RolloutPolicies (issue 16): for
// each DaemonSet a policy selects, it records the revision being rolled
// out and the one devices fall back to, admits the policy's waves one at a
// time as each meets the success criteria, and on a failed wave holds the
// rollout (Pause) or sends the wave's devices back (Rollback) — in the
// policy's status, never in the DaemonSet, whose spec stays as Git says.
//
// The DaemonSet loop reads that status through Gate: a device in an
// admitted wave gets the new template, any other keeps (or is given) the
// previous ControllerRevision's. Both loops compute waves with package
// waves, from the same policy and nodes, so they agree on every device.
//
// Deployments are not staged yet: a policy selecting one reports nothing
// for it.
package rollout
