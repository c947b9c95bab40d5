package scheduler

import (
	corev1 "k8s.io/api/core/v1"
)

// resources is the part of a ResourceList the scheduler accounts for.
type resources struct {
	MilliCPU         int64
	Memory           int64
	EphemeralStorage int64
}

func (r *resources) add(o resources) {
	r.MilliCPU += o.MilliCPU
	r.Memory += o.Memory
	r.EphemeralStorage += o.EphemeralStorage
}

func (r *resources) sub(o resources) {
	r.MilliCPU -= o.MilliCPU
	r.Memory -= o.Memory
	r.EphemeralStorage -= o.EphemeralStorage
}

func (r *resources) setMax(o resources) {
	r.MilliCPU = max(r.MilliCPU, o.MilliCPU)
	r.Memory = max(r.Memory, o.Memory)
	r.EphemeralStorage = max(r.EphemeralStorage, o.EphemeralStorage)
}

// Kubernetes' defaults for a container without requests, used only to
// score (so that request-less pods still spread); filtering uses the real
// requests, as kube-scheduler does.
const (
	defaultMilliCPURequest = 100
	defaultMemoryRequest   = 200 * 1024 * 1024
)

func fromList(l corev1.ResourceList) resources {
	var r resources
	if q, ok := l[corev1.ResourceCPU]; ok {
		r.MilliCPU = q.MilliValue()
	}
	if q, ok := l[corev1.ResourceMemory]; ok {
		r.Memory = q.Value()
	}
	if q, ok := l[corev1.ResourceEphemeralStorage]; ok {
		r.EphemeralStorage = q.Value()
	}
	return r
}

// containerRequests is what the container asks for. A limit without a
// request counts as the request, which is what the API server's defaulting
// would have written.
func containerRequests(c *corev1.Container) resources {
	r := fromList(c.Resources.Requests)
	lim := c.Resources.Limits
	if _, ok := c.Resources.Requests[corev1.ResourceCPU]; !ok {
		if q, ok := lim[corev1.ResourceCPU]; ok {
			r.MilliCPU = q.MilliValue()
		}
	}
	if _, ok := c.Resources.Requests[corev1.ResourceMemory]; !ok {
		if q, ok := lim[corev1.ResourceMemory]; ok {
			r.Memory = q.Value()
		}
	}
	if _, ok := c.Resources.Requests[corev1.ResourceEphemeralStorage]; !ok {
		if q, ok := lim[corev1.ResourceEphemeralStorage]; ok {
			r.EphemeralStorage = q.Value()
		}
	}
	return r
}

func containerNonZero(c *corev1.Container) resources {
	r := containerRequests(c)
	if r.MilliCPU == 0 {
		if _, ok := c.Resources.Requests[corev1.ResourceCPU]; !ok {
			r.MilliCPU = defaultMilliCPURequest
		}
	}
	if r.Memory == 0 {
		if _, ok := c.Resources.Requests[corev1.ResourceMemory]; !ok {
			r.Memory = defaultMemoryRequest
		}
	}
	return r
}

// podRequests applies Kubernetes' rule: app containers and restartable
// (sidecar) init containers run together and add up; each ordinary init
// container runs alone next to the sidecars started before it; the pod
// needs the larger of the two, per resource. Pod-level requests replace
// the containers' cpu and memory, and overhead is added on top.
func podRequests(pod *corev1.Pod, perContainer func(*corev1.Container) resources) resources {
	var reqs resources
	for i := range pod.Spec.Containers {
		reqs.add(perContainer(&pod.Spec.Containers[i]))
	}
	var sidecars, initMax resources
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		r := perContainer(c)
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			reqs.add(r)
			sidecars.add(r)
			r = sidecars
		} else {
			r.add(sidecars)
		}
		initMax.setMax(r)
	}
	reqs.setMax(initMax)
	if pod.Spec.Resources != nil {
		if q, ok := pod.Spec.Resources.Requests[corev1.ResourceCPU]; ok {
			reqs.MilliCPU = q.MilliValue()
		}
		if q, ok := pod.Spec.Resources.Requests[corev1.ResourceMemory]; ok {
			reqs.Memory = q.Value()
		}
	}
	if pod.Spec.Overhead != nil {
		reqs.add(fromList(pod.Spec.Overhead))
	}
	return reqs
}
