// Package deployment owns the Deployment loop: it turns a Deployment into
// ReplicaSets, one per pod template, and moves replicas between them. It
// never touches a pod; the ReplicaSet loop does that.
//
// The arithmetic is Kubernetes': the new ReplicaSet is named
// "<deployment>-<pod-template-hash>", the hash being FNV-32a over the pod
// template exactly as Kubernetes computes it; RollingUpdate resolves
// maxSurge rounding up and maxUnavailable rounding down, scales the new
// ReplicaSet up within the surge and the old ones down only as far as
// available replicas allow; Recreate scales the old ones to zero and waits
// for their pods to be gone before creating the new one; a paused Deployment
// only scales (proportionally, across its ReplicaSets); revision annotations
// make a rollback just another template change (the old ReplicaSet becomes
// the new one and gets the next revision); progressDeadlineSeconds turns a
// rollout without progress into Progressing=False/ProgressDeadlineExceeded;
// old ReplicaSets scaled to zero beyond revisionHistoryLimit are deleted.
//
// A Deployment a RolloutPolicy stages (Options.Rollouts) rolls out by its
// plan instead (staged.go): the new ReplicaSet may have the replicas that
// are not on devices keeping the previous revision, the pods of a revision
// their device should not run get a low pod-deletion-cost before any
// ReplicaSet is scaled down, and a rolled-back wave is the same arithmetic
// the other way. While it waits for its policy (a held wave, or one whose
// replicas all stand where the plan puts them), its progress deadline is
// paused as a paused Deployment's is (WaitingForRolloutWave).
package deployment
