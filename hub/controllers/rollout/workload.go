package rollout

import (
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"flotilla.dev/flotilla/api/scheduling"
	"flotilla.dev/flotilla/api/v1alpha1"
	"flotilla.dev/flotilla/hub/controllers/controllerutil"
	"flotilla.dev/flotilla/hub/controllers/daemonset"
	"flotilla.dev/flotilla/hub/controllers/deployment"
	"flotilla.dev/flotilla/hub/controllers/rollout/waves"
)

// staged is what the rollout loop needs of a workload it stages, the same
// for a DaemonSet and a Deployment.
type staged struct {
	id waves.Workload
	// hash is the current template's revision, as its pods are labelled
	// with revisionLabel.
	hash, revisionLabel string
	generation          int64
	// eligible are the devices the waves are made of.
	eligible []*corev1.Node
	// podsOf are the workload's pods by the device they are on (or, for a
	// DaemonSet, are meant for).
	podsOf map[string][]*corev1.Pod
	// occupiedOnly: a wave's devices are only those that run a pod of the
	// workload. A Deployment's replicas are on a few of the eligible
	// devices; the others have nothing to prove.
	occupiedOnly bool
	// revisionNumber is what kubectl rollout history shows for hash (0
	// while unknown).
	revisionNumber int64
	// retry is the workload's AnnotationRolloutRetryRequestedAt.
	retry string
}

func (c *Controller) daemonSetStaged(ds *appsv1.DaemonSet, nodes []*corev1.Node) (*staged, error) {
	hash := daemonset.Hash(ds)
	podsOf, err := c.podsByNode(ds)
	if err != nil {
		return nil, err
	}
	return &staged{
		id:   waves.Workload{Kind: daemonset.GVK.Kind, Name: ds.Name},
		hash: hash, revisionLabel: appsv1.ControllerRevisionHashLabelKey, generation: ds.Generation,
		eligible: Eligible(ds, nodes), podsOf: podsOf, revisionNumber: c.revisionNumber(ds, hash),
		retry: ds.Annotations[v1alpha1.AnnotationRolloutRetryRequestedAt],
	}, nil
}

func (c *Controller) deploymentStaged(d *appsv1.Deployment, nodes []*corev1.Node) (*staged, error) {
	hash := DeploymentHash(d)
	rss, err := c.rsLister.ReplicaSets(d.Namespace).List(labels.Everything())
	if err != nil {
		return nil, err
	}
	owned := map[types.UID]bool{}
	var number int64
	for _, rs := range rss {
		if !metav1.IsControlledBy(rs, d) {
			continue
		}
		owned[rs.UID] = true
		if rs.Labels[appsv1.DefaultDeploymentUniqueLabelKey] == hash {
			number, _ = strconv.ParseInt(rs.Annotations[deployment.AnnotationRevision], 10, 64)
		}
	}
	pods, err := c.podLister.Pods(d.Namespace).List(labels.Everything())
	if err != nil {
		return nil, err
	}
	podsOf := map[string][]*corev1.Pod{}
	for _, p := range pods {
		ref := metav1.GetControllerOfNoCopy(p)
		if ref == nil || !owned[ref.UID] || p.Spec.NodeName == "" || p.DeletionTimestamp != nil {
			continue
		}
		podsOf[p.Spec.NodeName] = append(podsOf[p.Spec.NodeName], p)
	}
	return &staged{
		id:   waves.Workload{Kind: deployment.GVK.Kind, Name: d.Name},
		hash: hash, revisionLabel: appsv1.DefaultDeploymentUniqueLabelKey, generation: d.Generation,
		eligible: EligibleForDeployment(d, nodes), podsOf: podsOf, occupiedOnly: true, revisionNumber: number,
		retry: d.Annotations[v1alpha1.AnnotationRolloutRetryRequestedAt],
	}, nil
}

// DeploymentHash is the pod-template-hash of d's current template, as the
// Deployment loop names its new ReplicaSet.
func DeploymentHash(d *appsv1.Deployment) string {
	return controllerutil.ComputeHash(&d.Spec.Template, d.Status.CollisionCount)
}

// EligibleForDeployment are the devices d's waves are made of: those its
// template's nodeSelector and required node affinity allow. Taints are
// left out on purpose: a device that goes offline is tainted, and would
// otherwise leave its wave and reshuffle the percent waves.
func EligibleForDeployment(d *appsv1.Deployment, nodes []*corev1.Node) []*corev1.Node {
	m := scheduling.CompileNodeMatcher(&corev1.Pod{ObjectMeta: d.Spec.Template.ObjectMeta, Spec: d.Spec.Template.Spec})
	out := make([]*corev1.Node, 0, len(nodes))
	for _, n := range nodes {
		if m.Matches(n.Labels, n.Name) {
			out = append(out, n)
		}
	}
	return out
}
