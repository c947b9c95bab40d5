package validation

import (
	"net/netip"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"flotilla.dev/flotilla/api"
	"flotilla.dev/flotilla/api/defaults"
)

func validService() *corev1.Service {
	return defaulted(&corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop"},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": "web"},
			Ports:    []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromString("http")}},
		},
	})
}

func TestValidateService(t *testing.T) {
	cases := []struct {
		name   string
		svc    func() *corev1.Service
		mutate func(s *corev1.Service)
		opts   Options
		want   []want
	}{
		{name: "valid", mutate: func(s *corev1.Service) {}},
		{name: "fleet topology", mutate: func(s *corev1.Service) {
			s.Annotations = map[string]string{api.AnnotationServiceTopology: api.ServiceTopologyFleet}
		}},
		{name: "unknown topology", mutate: func(s *corev1.Service) {
			s.Annotations = map[string]string{api.AnnotationServiceTopology: "global"}
		}, want: []want{notSupported("metadata.annotations[service.flotilla.dev/topology]")}},
		{name: "name must be a DNS-1035 label", mutate: func(s *corev1.Service) { s.Name = "1web" }, want: []want{invalid("metadata.name")}},
		{name: "no ports", mutate: func(s *corev1.Service) { s.Spec.Ports = nil }, want: []want{required("spec.ports")}},
		{name: "headless without ports", mutate: func(s *corev1.Service) {
			s.Spec.Ports, s.Spec.ClusterIP, s.Spec.ClusterIPs = nil, "None", []string{"None"}
		}},
		{name: "two unnamed ports", mutate: func(s *corev1.Service) {
			s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{Port: 443, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(8443)})
		}, want: []want{required("spec.ports[0].name"), required("spec.ports[1].name")}},
		{name: "duplicate port name and port", mutate: func(s *corev1.Service) {
			s.Spec.Ports[0].Name = "http"
			s.Spec.Ports = append(s.Spec.Ports, s.Spec.Ports[0])
		}, want: []want{duplicate("spec.ports[1].name"), duplicate("spec.ports[1]")}},
		{name: "same port, other protocol", mutate: func(s *corev1.Service) {
			s.Spec.Ports[0].Name = "dns-tcp"
			u := s.Spec.Ports[0]
			u.Name, u.Protocol = "dns-udp", corev1.ProtocolUDP
			s.Spec.Ports = append(s.Spec.Ports, u)
		}},
		{name: "port out of range", mutate: func(s *corev1.Service) { s.Spec.Ports[0].Port = 0 }, want: []want{invalid("spec.ports[0].port")}},
		{name: "bad target port", mutate: func(s *corev1.Service) { s.Spec.Ports[0].TargetPort = intstr.FromInt32(70000) }, want: []want{invalid("spec.ports[0].targetPort")}},
		{name: "bad protocol", mutate: func(s *corev1.Service) { s.Spec.Ports[0].Protocol = "HTTP" }, want: []want{notSupported("spec.ports[0].protocol")}},
		{name: "node port on ClusterIP", mutate: func(s *corev1.Service) { s.Spec.Ports[0].NodePort = 30080 }, want: []want{forbidden("spec.ports[0].nodePort")}},
		{name: "node port in range", svc: nodePortService, mutate: func(s *corev1.Service) { s.Spec.Ports[0].NodePort = 30080 }},
		{name: "node port out of range", svc: nodePortService, mutate: func(s *corev1.Service) { s.Spec.Ports[0].NodePort = 8080 }, want: []want{invalid("spec.ports[0].nodePort")}},
		{name: "node port range from options", svc: nodePortService, opts: Options{NodePortMin: 8000, NodePortMax: 9000}, mutate: func(s *corev1.Service) { s.Spec.Ports[0].NodePort = 8080 }},
		{name: "duplicate node port", svc: nodePortService, mutate: func(s *corev1.Service) {
			s.Spec.Ports[0].Name, s.Spec.Ports[0].NodePort = "a", 30080
			s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{Name: "b", Port: 81, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(81), NodePort: 30080})
		}, want: []want{duplicate("spec.ports[1].nodePort")}},
		{name: "cluster IP chosen by client", mutate: func(s *corev1.Service) { setClusterIP(s, "10.43.0.10") }},
		{name: "cluster IP not an IP", mutate: func(s *corev1.Service) { setClusterIP(s, "ten") }, want: []want{invalid("spec.clusterIP")}},
		{name: "cluster IP outside the range", mutate: func(s *corev1.Service) { setClusterIP(s, "10.0.0.1") }, want: []want{invalid("spec.clusterIP")}},
		{name: "cluster IP range from options", opts: Options{ServiceCIDR: netip.MustParsePrefix("10.0.0.0/16")}, mutate: func(s *corev1.Service) { setClusterIP(s, "10.0.0.1") }},
		{name: "headless NodePort", svc: nodePortService, mutate: func(s *corev1.Service) { setClusterIP(s, "None") }, want: []want{invalid("spec.clusterIP")}},
		{name: "clusterIPs disagree", mutate: func(s *corev1.Service) { s.Spec.ClusterIP, s.Spec.ClusterIPs = "10.43.0.10", []string{"10.43.0.11"} },
			want: []want{invalid("spec.clusterIPs[0]")}},
		{name: "external name", svc: func() *corev1.Service {
			return defaulted(&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "shop"},
				Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "db.example.com"}})
		}, mutate: func(s *corev1.Service) {}},
		{name: "external name missing", svc: func() *corev1.Service {
			return defaulted(&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "shop"},
				Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName}})
		}, mutate: func(s *corev1.Service) {}, want: []want{required("spec.externalName")}},
		{name: "bad type", mutate: func(s *corev1.Service) { s.Spec.Type = "Mesh" }, want: []want{notSupported("spec.type")}},
		{name: "bad session affinity", mutate: func(s *corev1.Service) { s.Spec.SessionAffinity = "Cookie" }, want: []want{notSupported("spec.sessionAffinity")}},
		{name: "client IP timeout", mutate: func(s *corev1.Service) {
			s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
			secs := int32(0)
			s.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: &secs}}
		}, want: []want{invalid("spec.sessionAffinityConfig.clientIP.timeoutSeconds")}},
		{name: "external traffic policy on ClusterIP", mutate: func(s *corev1.Service) { s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal },
			want: []want{invalid("spec.externalTrafficPolicy")}},
		{name: "bad selector", mutate: func(s *corev1.Service) { s.Spec.Selector["app"] = "web shop" }, want: []want{invalid("spec.selector")}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			mk := validService
			if tc.svc != nil {
				mk = tc.svc
			}
			s := mk()
			tc.mutate(s)
			expectErrors(t, ValidateCreate(s, tc.opts), tc.want...)
		})
	}
}

func nodePortService() *corev1.Service {
	s := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop"},
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeNodePort,
			Selector: map[string]string{"app": "web"},
			Ports:    []corev1.ServicePort{{Port: 80}},
		},
	}
	return defaulted(s)
}

func setClusterIP(s *corev1.Service, ip string) {
	s.Spec.ClusterIP, s.Spec.ClusterIPs = ip, []string{ip}
}

func TestValidateServiceUpdate(t *testing.T) {
	old := stored(validService())
	// The hub's allocator fills in the address after create.
	alloc := old.DeepCopy()
	setClusterIP(alloc, "10.43.0.20")
	expectErrors(t, ValidateUpdate(alloc, old, Options{}))

	old = alloc
	moved := old.DeepCopy()
	setClusterIP(moved, "10.43.0.21")
	expectErrors(t, ValidateUpdate(moved, old, Options{}), invalid("spec.clusterIP"), invalid("spec.clusterIPs[0]"))

	// A manifest from Git has no clusterIP: DefaultUpdate keeps the
	// allocated one, so the update is valid and the address stays.
	manifest := old.DeepCopy()
	manifest.Spec.ClusterIP, manifest.Spec.ClusterIPs = "", nil
	defaults.DefaultUpdate(manifest, old)
	expectErrors(t, ValidateUpdate(manifest, old, Options{}))
	if manifest.Spec.ClusterIP != "10.43.0.20" {
		t.Errorf("clusterIP = %q after DefaultUpdate, want the allocated 10.43.0.20", manifest.Spec.ClusterIP)
	}
}

func TestValidateServiceStatus(t *testing.T) {
	old := stored(validService())
	s := old.DeepCopy()
	s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "192.0.2.1"}, {IP: "nope"}}
	expectErrors(t, ValidateStatusUpdate(s, old), invalid("status.loadBalancer.ingress[1].ip"))
}
