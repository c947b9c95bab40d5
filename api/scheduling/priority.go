package scheduling

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Kubernetes' priority figures: users may go up to a billion, the two
// built-in classes sit above that so no user workload can preempt them.
const (
	HighestUserDefinablePriority = int32(1000000000)
	SystemCriticalPriority       = 2 * HighestUserDefinablePriority
	// SystemPriorityClassPrefix is reserved for the built-in classes.
	SystemPriorityClassPrefix = "system-"
	SystemClusterCritical     = SystemPriorityClassPrefix + "cluster-critical"
	SystemNodeCritical        = SystemPriorityClassPrefix + "node-critical"
)

// SystemPriorityClasses are the classes every hub has, as kube-apiserver
// creates them at start: the same names, values and descriptions, so that
// manifests naming them (DaemonSets of networking and monitoring agents
// often do) work unchanged.
func SystemPriorityClasses() []*schedulingv1.PriorityClass {
	policy := corev1.PreemptLowerPriority
	return []*schedulingv1.PriorityClass{
		{
			ObjectMeta:       metav1.ObjectMeta{Name: SystemNodeCritical},
			Value:            SystemCriticalPriority + 1000,
			Description:      "Used for system critical pods that must not be moved from their current node.",
			PreemptionPolicy: &policy,
		},
		{
			ObjectMeta:       metav1.ObjectMeta{Name: SystemClusterCritical},
			Value:            SystemCriticalPriority,
			Description:      "Used for system critical pods that must run in the cluster, but can be moved to another node if necessary.",
			PreemptionPolicy: &policy,
		},
	}
}

// IsKnownSystemPriorityClass reports whether a class with the reserved
// prefix is one of the built-in ones exactly as built in; the error says
// what differs.
func IsKnownSystemPriorityClass(name string, value int32, globalDefault bool) (bool, error) {
	for _, spc := range SystemPriorityClasses() {
		if spc.Name != name {
			continue
		}
		if spc.Value != value {
			return false, fmt.Errorf("value of %v PriorityClass must be %v", spc.Name, spc.Value)
		}
		if spc.GlobalDefault != globalDefault {
			return false, fmt.Errorf("globalDefault of %v PriorityClass must be %v", spc.Name, spc.GlobalDefault)
		}
		return true, nil
	}
	return false, fmt.Errorf("%v is not a known system priority class", name)
}

// IsSystemName reports whether name uses the reserved prefix.
func IsSystemName(name string) bool { return strings.HasPrefix(name, SystemPriorityClassPrefix) }

// PodPriority is the pod's resolved priority; a pod admitted without a
// class (or created before classes existed) has 0, as in Kubernetes.
func PodPriority(pod *corev1.Pod) int32 {
	if pod.Spec.Priority != nil {
		return *pod.Spec.Priority
	}
	return 0
}
