package apiserver

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"flotilla.dev/flotilla/api"
)

// serviceAllocator hands out ClusterIPs and NodePorts. Its state is derived
// from the stored Services when the hub starts; in between, every
// allocation happens here under one lock, before the Service is written.
// Each address handed out is also reserved in the store (a key created
// only if absent), so hubs that share a store (etcd) never hand out one
// address twice: a candidate another hub reserved is skipped, and learnt.
type serviceAllocator struct {
	reserve  *reservations
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

// rebuild learns what the stored Services hold and repairs the store's
// reservations to match.
func (a *serviceAllocator) rebuild(ctx context.Context, c *watchCache) error {
	svcRes, _ := api.ResourceForKind(corev1.SchemeGroupVersion.WithKind("Service"))
	objs, _ := c.list(svcRes, &filter{})
	a.mu.Lock()
	defer a.mu.Unlock()
	held := map[string]map[string]string{kindServiceIP: {}, kindNodePort: {}}
	for _, co := range objs {
		svc := co.obj.(*corev1.Service)
		holder := svc.Namespace + "/" + svc.Name
		for _, ip := range clusterIPs(svc) {
			if off, ok := a.offset(ip); ok {
				a.ips[off] = true
				held[kindServiceIP][ip] = holder
			}
		}
		for _, p := range svc.Spec.Ports {
			if p.NodePort != 0 {
				a.ports[p.NodePort] = true
				held[kindNodePort][fmt.Sprint(p.NodePort)] = holder
			}
		}
	}
	return a.reserve.repair(ctx, held)
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
func (a *serviceAllocator) allocate(ctx context.Context, svc *corev1.Service, old *corev1.Service, dryRun bool) (takenIPs []uint32, takenPorts []int32, errs field.ErrorList, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	undo := func() {
		for _, o := range takenIPs {
			delete(a.ips, o)
		}
		for _, p := range takenPorts {
			delete(a.ports, p)
		}
		if !dryRun {
			a.reserve.freeAll(ctx, a.ipStrings(takenIPs), takenPorts)
		}
	}
	holder := svc.Namespace + "/" + svc.Name
	// takeIP and takePort reserve in the store (not for a dry run); false
	// means another hub holds it, which this one now knows too.
	takeIP := func(off uint32) (bool, error) {
		a.ips[off] = true
		if dryRun {
			return true, nil
		}
		return a.reserve.take(ctx, kindServiceIP, a.ipString(off), holder)
	}
	takePort := func(p int32) (bool, error) {
		a.ports[p] = true
		if dryRun {
			return true, nil
		}
		return a.reserve.take(ctx, kindNodePort, fmt.Sprint(p), holder)
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
				got, err := takeIP(off)
				if err != nil {
					undo()
					return nil, nil, nil, err
				}
				if got {
					takenIPs = append(takenIPs, off)
				} else {
					errs = append(errs, field.Invalid(specPath.Child("clusterIP"), svc.Spec.ClusterIP, "provided IP is already allocated"))
				}
			}
		} else {
			off, ok, err := claim(a.nextFreeIP, takeIP)
			switch {
			case err != nil:
				undo()
				return nil, nil, nil, err
			case !ok:
				errs = append(errs, field.Invalid(specPath.Child("clusterIP"), "", "no more service IPs are free in the service range"))
			default:
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
					got, err := takePort(p.NodePort)
					if err != nil {
						undo()
						return nil, nil, nil, err
					}
					if got {
						takenPorts = append(takenPorts, p.NodePort)
					} else {
						errs = append(errs, field.Invalid(path, p.NodePort, "provided port is already allocated"))
					}
				}
			default:
				port, ok, err := claim(a.nextFreePort, takePort)
				switch {
				case err != nil:
					undo()
					return nil, nil, nil, err
				case !ok:
					errs = append(errs, field.Invalid(path, 0, "no more node ports are free"))
				default:
					takenPorts = append(takenPorts, port)
					p.NodePort = port
				}
			}
		}
	} else {
		for i := range svc.Spec.Ports {
			svc.Spec.Ports[i].NodePort = 0
		}
	}
	if len(errs) > 0 {
		undo()
		return nil, nil, errs, nil
	}
	return takenIPs, takenPorts, nil, nil
}

// claim takes the first candidate next offers that take gets, passing
// over those another hub holds; ok is false when none is left.
func claim[T any](next func() (T, bool), take func(T) (bool, error)) (v T, ok bool, err error) {
	for {
		if v, ok = next(); !ok {
			return v, false, nil
		}
		got, err := take(v)
		if err != nil || got {
			return v, got, err
		}
	}
}

// forget drops from memory what a dry run took (it reserved nothing).
func (a *serviceAllocator) forget(ips []uint32, ports []int32) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, o := range ips {
		delete(a.ips, o)
	}
	for _, p := range ports {
		delete(a.ports, p)
	}
}

func (a *serviceAllocator) ipStrings(offs []uint32) []string {
	out := make([]string, len(offs))
	for i, o := range offs {
		out[i] = a.ipString(o)
	}
	return out
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

func (a *serviceAllocator) release(ctx context.Context, ips []uint32, ports []int32) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, o := range ips {
		delete(a.ips, o)
	}
	for _, p := range ports {
		delete(a.ports, p)
	}
	a.reserve.freeAll(ctx, a.ipStrings(ips), ports)
}

// releaseService frees what a deleted Service held.
func (a *serviceAllocator) releaseService(ctx context.Context, svc *corev1.Service) {
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
	a.release(ctx, ips, ports)
}

// Admission hooks around the store writes.

func (s *Server) admitCreate(ctx context.Context, res *api.Resource, obj runtime.Object, dryRun bool) (release func(), err error) {
	svc, ok := obj.(*corev1.Service)
	if !ok {
		return func() {}, nil
	}
	ips, ports, errs, err := s.alloc.allocate(ctx, svc, nil, dryRun)
	if err != nil {
		return nil, apierrors.NewInternalError(fmt.Errorf("reserving the Service's addresses: %w", err))
	}
	if len(errs) > 0 {
		return nil, invalid(res, svc.Name, errs)
	}
	if dryRun {
		return func() { s.alloc.forget(ips, ports) }, nil
	}
	return func() { s.alloc.release(context.WithoutCancel(ctx), ips, ports) }, nil
}

// admitUpdate returns a function to call with whether the write happened.
func (s *Server) admitUpdate(ctx context.Context, res *api.Resource, obj, old runtime.Object, dryRun bool) (func(committed bool), error) {
	svc, ok := obj.(*corev1.Service)
	if !ok {
		return func(bool) {}, nil
	}
	oldSvc := old.(*corev1.Service)
	ips, ports, errs, err := s.alloc.allocate(ctx, svc, oldSvc, dryRun)
	if err != nil {
		return nil, apierrors.NewInternalError(fmt.Errorf("reserving the Service's addresses: %w", err))
	}
	if len(errs) > 0 {
		return nil, invalid(res, svc.Name, errs)
	}
	ctx = context.WithoutCancel(ctx)
	return func(committed bool) {
		if dryRun {
			s.alloc.forget(ips, ports)
			return
		}
		if !committed {
			s.alloc.release(ctx, ips, ports)
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
		s.alloc.release(ctx, nil, freed)
	}, nil
}

func (s *Server) admitDelete(ctx context.Context, res *api.Resource, obj runtime.Object) {
	if svc, ok := obj.(*corev1.Service); ok {
		s.alloc.releaseService(context.WithoutCancel(ctx), svc)
	}
}
