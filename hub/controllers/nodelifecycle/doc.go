// Package nodelifecycle owns what the hub decides about nodes as a whole:
// their pod CIDR and their health.
//
// Pod CIDRs: every Node without spec.podCIDR gets the next free /24 of
// the cluster ranges, in order (10.42.0.0/16, then 10.64.0.0/10: 16,640
// devices; both configurable) in spec.podCIDR and spec.podCIDRs, and the
// ranges in the annotation api.AnnotationClusterCIDRs, from which its
// agent knows the pod network. A full pool is a CIDRNotAvailable Event and
// a NetworkUnavailable condition on the Node. The
// set of taken subnets is rebuilt from the Nodes themselves when the loop
// starts, so a restart never hands one out twice; a deleted Node's subnet
// is reused only after every other free one.
//
// Health: a node whose Lease in kube-node-lease has not been seen renewed
// for GracePeriod (40 s) gets every condition Unknown (NodeStatusUnknown,
// "Kubelet stopped posting node status.") and the
// node.kubernetes.io/unreachable NoSchedule and NoExecute taints, removed
// when the node posts Ready again. The pods of an Unknown node get
// Ready=False, and a pod is deleted once its toleration of the unreachable
// NoExecute taint runs out (tolerationSeconds after the taint was added;
// at once without a toleration; never with one without tolerationSeconds).
// Edge rules on top: DaemonSet pods and mirror pods are never evicted;
// nodes labelled node.flotilla.dev/autonomy=true are never evicted; when
// more than DisruptionThreshold (55%) of the nodes are unreachable at once
// no pod is evicted (the hub's own link is the likely fault); and for a
// full grace period after the loop starts no node is marked Unknown and no
// pod is evicted, so devices can reach a restarted hub first.
//
// Liveness is measured on the hub's clock by when a renewal was observed,
// never by the timestamps devices write, since device clocks drift.
package nodelifecycle
