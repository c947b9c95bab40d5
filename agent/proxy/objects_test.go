package proxy

import (
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func ptr[T any](v T) *T { return &v }

type port struct {
	name     string
	proto    corev1.Protocol
	port     int32
	nodePort int32
}

func service(ns, name, clusterIP string, ports ...port) *corev1.Service {
	s := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: clusterIP},
	}
	for _, p := range ports {
		if p.proto == "" {
			p.proto = corev1.ProtocolTCP
		}
		s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{Name: p.name, Protocol: p.proto, Port: p.port, NodePort: p.nodePort})
		if p.nodePort != 0 {
			s.Spec.Type = corev1.ServiceTypeNodePort
		}
	}
	return s
}

type ep struct {
	ip          string
	node        string
	notReady    bool
	terminating bool
	notServing  bool
}

func endpointSlice(ns, svc, name string, ports []port, eps ...ep) *discoveryv1.EndpointSlice {
	sl := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
		AddressType: discoveryv1.AddressTypeIPv4,
	}
	for _, p := range ports {
		if p.proto == "" {
			p.proto = corev1.ProtocolTCP
		}
		sl.Ports = append(sl.Ports, discoveryv1.EndpointPort{Name: ptr(p.name), Protocol: ptr(p.proto), Port: ptr(p.port)})
	}
	for _, e := range eps {
		node := e.node
		if node == "" {
			node = "other"
		}
		sl.Endpoints = append(sl.Endpoints, discoveryv1.Endpoint{
			Addresses: []string{e.ip},
			NodeName:  ptr(node),
			Conditions: discoveryv1.EndpointConditions{
				Ready:       ptr(!e.notReady && !e.terminating),
				Serving:     ptr(!e.notServing),
				Terminating: ptr(e.terminating),
			},
		})
	}
	return sl
}
