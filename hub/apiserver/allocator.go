package apiserver

import (
	"encoding/binary"
	"fmt"
	"net"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"flotilla.dev/flotilla/api"
)

// serviceAllocator hands out ClusterIPs and NodePorts. Its state is derived
// from the stored Services when the hub starts, so nothing is handed out
// twice across restarts; in between, every allocation happens here under
// one lock, before the Service is written.
type serviceAllocator struct {
	mu       sync.Mutex
	base     uint32
	size     uint32
	nextIP   uint32
	ips      map[uint32]bool
	portBase int32
	portSize int32
	nextPort int32
	ports    map[int32]bool
}

func newServiceAllocator(cidr string, portBase, portSize int) (*serviceAllocator, error) {
	if cidr == "" {
		cidr = api.ServiceCIDR
	}
	if portBase == 0 {
		portBase, portSize = api.NodePortMin, api.NodePortMax-api.NodePortMin+1
	}
	_, n, err := net.ParseCIDR(cidr)
	if err != nil {
		return nil, fmt.Errorf("service CIDR %q: %w", cidr, err)
	}
	if n.IP.To4() == nil {
		return nil, fmt.Errorf("service CIDR %q is not an IPv4 CIDR", cidr)
	}
	ones, bits := n.Mask.Size()
	return &serviceAllocator{
		base: binary.BigEndian.Uint32(n.IP.To4()), size: 1 << (bits - ones),
		ips: map[uint32]bool{}, portBase: int32(portBase), portSize: int32(portSize), ports: map[int32]bool{}, nextIP: 1,
	}, nil
}

func (a *serviceAllocator) rebuild(c *watchCache) {
	svcRes, _ := api.ResourceForKind(corev1.SchemeGroupVersion.WithKind("Service"))
	objs, _ := c.list(svcRes, &filter{})
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, co := range objs {
		svc := co.obj.(*corev1.Service)
		for _, ip := range clusterIPs(svc) {
			if off, ok := a.offset(ip); ok {
				a.ips[off] = true
			}
		}
		for _, p := range svc.Spec.Ports {
			if p.NodePort != 0 {
				a.ports[p.NodePort] = true
			}
		}
	}
}

func clusterIPs(svc *corev1.Service) []string {
	if len(svc.Spec.ClusterIPs) > 0 {
		return svc.Spec.ClusterIPs
	}
	if svc.Spec.ClusterIP != "" {
		return []string{svc.Spec.ClusterIP}
	}
	return nil
}

func (a *serviceAllocator) offset(ip string) (uint32, bool) {
	p := net.ParseIP(ip).To4()
	if p == nil {
		return 0, false
	}
	v := binary.BigEndian.Uint32(p)
	if v < a.base || v >= a.base+a.size {
		return 0, false
	}
	return v - a.base, true
}

func (a *serviceAllocator) ipString(off uint32) string {
	b := make(net.IP, 4)
	binary.BigEndian.PutUint32(b, a.base+off)
	return b.String()
}

// wantsClusterIP is true for the service types that get a virtual IP.
func wantsClusterIP(svc *corev1.Service) bool {
	return svc.Spec.Type != corev1.ServiceTypeExternalName && svc.Spec.ClusterIP != corev1.ClusterIPNone
}

func wantsNodePorts(svc *corev1.Service) bool {
	return svc.Spec.Type == corev1.ServiceTypeNodePort || svc.Spec.Type == corev1.ServiceTypeLoadBalancer
}

// allocate gives svc what it lacks (or checks what it asks for) and
// returns what it took, to be released if the write does not happen.
func (a *serviceAllocator) allocate(svc *corev1.Service, old *corev1.Service) (takenIPs []uint32, takenPorts []int32, errs field.ErrorList) {
	a.mu.Lock()
	defer a.mu.Unlock()
	undo := func() {
		for _, o := range takenIPs {
			delete(a.ips, o)
		}
		for _, p := range takenPorts {
			delete(a.ports, p)
		}
	}
	specPath := field.NewPath("spec")
	if wantsClusterIP(svc) && (old == nil || len(clusterIPs(old)) == 0 || clusterIPs(old)[0] == corev1.ClusterIPNone) {
		if svc.Spec.ClusterIP != "" {
			off, ok := a.offset(svc.Spec.ClusterIP)
			switch {
			case !ok:
				errs = append(errs, field.Invalid(specPath.Child("clusterIP"), svc.Spec.ClusterIP,
					fmt.Sprintf("the requested IP is not in the service range %s", a.ipString(0)+"/"+maskLen(a.size))))
			case a.ips[off] || off == 0 || off == a.size-1:
				errs = append(errs, field.Invalid(specPath.Child("clusterIP"), svc.Spec.ClusterIP, "provided IP is already allocated"))
			default:
				a.ips[off] = true
				takenIPs = append(takenIPs, off)
			}
		} else {
			off, ok := a.nextFreeIP()
			if !ok {
				errs = append(errs, field.Invalid(specPath.Child("clusterIP"), "", "no more service IPs are free in the service range"))
			} else {
				a.ips[off] = true
				takenIPs = append(takenIPs, off)
				svc.Spec.ClusterIP = a.ipString(off)
			}
		}
		if len(errs) == 0 {
			svc.Spec.ClusterIPs = []string{svc.Spec.ClusterIP}
		}
	}
	if wantsNodePorts(svc) {
		oldPorts := map[int32]bool{}
		if old != nil {
			for _, p := range old.Spec.Ports {
				if p.NodePort != 0 {
					oldPorts[p.NodePort] = true
				}
			}
		}
		for i := range svc.Spec.Ports {
			p := &svc.Spec.Ports[i]
			path := specPath.Child("ports").Index(i).Child("nodePort")
			switch {
			case p.NodePort != 0 && oldPorts[p.NodePort]:
			case p.NodePort != 0:
				if p.NodePort < a.portBase || p.NodePort >= a.portBase+a.portSize {
					errs = append(errs, field.Invalid(path, p.NodePort, fmt.Sprintf("provided port is not in the valid range. The range of valid ports is %d-%d", a.portBase, a.portBase+a.portSize-1)))
				} else if a.ports[p.NodePort] {
					errs = append(errs, field.Invalid(path, p.NodePort, "provided port is already allocated"))
				} else {
					a.ports[p.NodePort] = true
					takenPorts = append(takenPorts, p.NodePort)
				}
			default:
				port, ok := a.nextFreePort()
				if !ok {
					errs = append(errs, field.Invalid(path, 0, "no more node ports are free"))
					continue
				}
				a.ports[port] = true
				takenPorts = append(takenPorts, port)
				p.NodePort = port
			}
		}
	} else {
		for i := range svc.Spec.Ports {
			svc.Spec.Ports[i].NodePort = 0
		}
	}
	if len(errs) > 0 {
		undo()
		return nil, nil, errs
	}
	return takenIPs, takenPorts, nil
}

func maskLen(size uint32) string {
	n := 32
	for size > 1 {
		size >>= 1
		n--
	}
	return fmt.Sprint(n)
}

func (a *serviceAllocator) nextFreeIP() (uint32, bool) {
	// Skip the network address and the broadcast address; go round the
	// range so released IPs are not reused at once.
	for i := uint32(0); i < a.size; i++ {
		off := (a.nextIP + i) % a.size
		if off == 0 || off == a.size-1 || a.ips[off] {
			continue
		}
		a.nextIP = off + 1
		return off, true
	}
	return 0, false
}

func (a *serviceAllocator) nextFreePort() (int32, bool) {
	for i := int32(0); i < a.portSize; i++ {
		p := a.portBase + (a.nextPort+i)%a.portSize
		if !a.ports[p] {
			a.nextPort = (p - a.portBase + 1) % a.portSize
			return p, true
		}
	}
	return 0, false
}

func (a *serviceAllocator) release(ips []uint32, ports []int32) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, o := range ips {
		delete(a.ips, o)
	}
	for _, p := range ports {
		delete(a.ports, p)
	}
}

// releaseService frees what a deleted Service held.
func (a *serviceAllocator) releaseService(svc *corev1.Service) {
	var ips []uint32
	for _, ip := range clusterIPs(svc) {
		if off, ok := a.offset(ip); ok {
			ips = append(ips, off)
		}
	}
	var ports []int32
	for _, p := range svc.Spec.Ports {
		if p.NodePort != 0 {
			ports = append(ports, p.NodePort)
		}
	}
	a.release(ips, ports)
}

// Admission hooks around the store writes.

func (s *Server) admitCreate(res *api.Resource, obj runtime.Object, dryRun bool) (release func(), err error) {
	svc, ok := obj.(*corev1.Service)
	if !ok {
		return func() {}, nil
	}
	ips, ports, errs := s.alloc.allocate(svc, nil)
	if len(errs) > 0 {
		return nil, invalid(res, svc.Name, errs)
	}
	return func() { s.alloc.release(ips, ports) }, nil
}

// admitUpdate returns a function to call with whether the write happened.
func (s *Server) admitUpdate(res *api.Resource, obj, old runtime.Object, dryRun bool) (func(committed bool), error) {
	svc, ok := obj.(*corev1.Service)
	if !ok {
		return func(bool) {}, nil
	}
	oldSvc := old.(*corev1.Service)
	ips, ports, errs := s.alloc.allocate(svc, oldSvc)
	if len(errs) > 0 {
		return nil, invalid(res, svc.Name, errs)
	}
	return func(committed bool) {
		if !committed {
			s.alloc.release(ips, ports)
			return
		}
		// Free node ports the update dropped.
		kept := map[int32]bool{}
		for _, p := range svc.Spec.Ports {
			kept[p.NodePort] = true
		}
		var freed []int32
		for _, p := range oldSvc.Spec.Ports {
			if p.NodePort != 0 && !kept[p.NodePort] {
				freed = append(freed, p.NodePort)
			}
		}
		s.alloc.release(nil, freed)
	}, nil
}

func (s *Server) admitDelete(res *api.Resource, obj runtime.Object) {
	if svc, ok := obj.(*corev1.Service); ok {
		s.alloc.releaseService(svc)
	}
}
