package scheduler

import (
	corev1 "k8s.io/api/core/v1"
)

// hostPort is one port a pod takes on its node's addresses.
type hostPort struct {
	protocol corev1.Protocol
	ip       string
	port     int32
}

const anyIP = "0.0.0.0"

func (a hostPort) conflicts(b hostPort) bool {
	return a.port == b.port && a.protocol == b.protocol &&
		(a.ip == b.ip || a.ip == anyIP || b.ip == anyIP)
}

// podHostPorts lists the host ports of the pod's containers and sidecars
// (the containers that run for the pod's lifetime).
func podHostPorts(pod *corev1.Pod) []hostPort {
	var out []hostPort
	add := func(c *corev1.Container) {
		for _, p := range c.Ports {
			if p.HostPort <= 0 {
				continue
			}
			hp := hostPort{protocol: p.Protocol, ip: p.HostIP, port: p.HostPort}
			if hp.protocol == "" {
				hp.protocol = corev1.ProtocolTCP
			}
			if hp.ip == "" {
				hp.ip = anyIP
			}
			out = append(out, hp)
		}
	}
	for i := range pod.Spec.Containers {
		add(&pod.Spec.Containers[i])
	}
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			add(c)
		}
	}
	return out
}
