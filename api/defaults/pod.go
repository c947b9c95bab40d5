package defaults

import (
	"reflect"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// Taints the node lifecycle controller puts on a node that stops reporting,
// and how long a pod stays bound to such a node by default.
const (
	TaintNodeNotReady         = "node.kubernetes.io/not-ready"
	TaintNodeUnreachable      = "node.kubernetes.io/unreachable"
	DefaultTolerationSeconds  = int64(300)
	DefaultProbeTimeout       = int32(1)
	DefaultProbePeriod        = int32(10)
	DefaultProbeSuccess       = int32(1)
	DefaultProbeFailure       = int32(3)
	DefaultTerminationGrace   = int64(corev1.DefaultTerminationGracePeriodSeconds)
	DefaultClientIPAffinity   = int32(corev1.DefaultClientIPServiceAffinitySeconds)
	DefaultTokenExpirySeconds = int64(3600)
)

// pod applies the defaults of a Pod proper. Some of them (requests copied
// from limits, service links, the NoExecute tolerations) are deliberately
// not applied to pod templates, as in Kubernetes: a template stays as its
// author wrote it, and its pods get them when they are created.
func pod(p *corev1.Pod) {
	podSpec(&p.Spec)
	for i := range p.Spec.InitContainers {
		requestsFromLimits(&p.Spec.InitContainers[i].Resources)
	}
	for i := range p.Spec.Containers {
		requestsFromLimits(&p.Spec.Containers[i].Resources)
	}
	if p.Spec.EnableServiceLinks == nil {
		p.Spec.EnableServiceLinks = ptr(corev1.DefaultEnableServiceLinks)
	}
	if p.Spec.HostNetwork {
		// With the node's network the container port is the host port.
		hostNetworkPorts(p.Spec.InitContainers)
		hostNetworkPorts(p.Spec.Containers)
	}
	defaultTolerations(&p.Spec)
}

// podTemplate applies the defaults Kubernetes gives the pod template of a
// workload.
func podTemplate(t *corev1.PodTemplateSpec) {
	podSpec(&t.Spec)
}

func podSpec(s *corev1.PodSpec) {
	if s.DNSPolicy == "" {
		s.DNSPolicy = corev1.DNSClusterFirst
	}
	if s.RestartPolicy == "" {
		s.RestartPolicy = corev1.RestartPolicyAlways
	}
	if s.SecurityContext == nil {
		s.SecurityContext = &corev1.PodSecurityContext{}
	}
	if s.TerminationGracePeriodSeconds == nil {
		s.TerminationGracePeriodSeconds = ptr(DefaultTerminationGrace)
	}
	if s.SchedulerName == "" {
		s.SchedulerName = corev1.DefaultSchedulerName
	}
	for i := range s.Volumes {
		volume(&s.Volumes[i])
	}
	for i := range s.InitContainers {
		container(&s.InitContainers[i])
	}
	for i := range s.Containers {
		container(&s.Containers[i])
	}
	for i := range s.EphemeralContainers {
		c := corev1.Container(s.EphemeralContainers[i].EphemeralContainerCommon)
		container(&c)
		s.EphemeralContainers[i].EphemeralContainerCommon = corev1.EphemeralContainerCommon(c)
	}
	roundUp(s.Overhead)
	if s.Resources != nil {
		roundUp(s.Resources.Limits)
		roundUp(s.Resources.Requests)
	}
}

func container(c *corev1.Container) {
	if c.ImagePullPolicy == "" {
		c.ImagePullPolicy = PullPolicyFor(c.Image)
	}
	if c.TerminationMessagePath == "" {
		c.TerminationMessagePath = corev1.TerminationMessagePathDefault
	}
	if c.TerminationMessagePolicy == "" {
		c.TerminationMessagePolicy = corev1.TerminationMessageReadFile
	}
	for i := range c.Ports {
		if c.Ports[i].Protocol == "" {
			c.Ports[i].Protocol = corev1.ProtocolTCP
		}
	}
	for i := range c.Env {
		if vf := c.Env[i].ValueFrom; vf != nil && vf.FieldRef != nil && vf.FieldRef.APIVersion == "" {
			vf.FieldRef.APIVersion = "v1"
		}
	}
	roundUp(c.Resources.Limits)
	roundUp(c.Resources.Requests)
	probe(c.LivenessProbe)
	probe(c.ReadinessProbe)
	probe(c.StartupProbe)
	if c.Lifecycle != nil {
		lifecycleHandler(c.Lifecycle.PostStart)
		lifecycleHandler(c.Lifecycle.PreStop)
	}
}

// PullPolicyFor is the pull policy Kubernetes gives an image reference:
// Always for ":latest" or no tag and no digest (the reference may move),
// IfNotPresent otherwise.
func PullPolicyFor(image string) corev1.PullPolicy {
	name, _, hasDigest := strings.Cut(image, "@")
	tag := ""
	if i := strings.LastIndexByte(name, ':'); i > strings.LastIndexByte(name, '/') {
		tag = name[i+1:]
	}
	if tag == "latest" || (tag == "" && !hasDigest) {
		return corev1.PullAlways
	}
	return corev1.PullIfNotPresent
}

func probe(p *corev1.Probe) {
	if p == nil {
		return
	}
	if p.TimeoutSeconds == 0 {
		p.TimeoutSeconds = DefaultProbeTimeout
	}
	if p.PeriodSeconds == 0 {
		p.PeriodSeconds = DefaultProbePeriod
	}
	if p.SuccessThreshold == 0 {
		p.SuccessThreshold = DefaultProbeSuccess
	}
	if p.FailureThreshold == 0 {
		p.FailureThreshold = DefaultProbeFailure
	}
	httpGet(p.HTTPGet)
	if p.GRPC != nil && p.GRPC.Service == nil {
		p.GRPC.Service = ptr("")
	}
}

func lifecycleHandler(h *corev1.LifecycleHandler) {
	if h != nil {
		httpGet(h.HTTPGet)
	}
}

func httpGet(h *corev1.HTTPGetAction) {
	if h == nil {
		return
	}
	if h.Path == "" {
		h.Path = "/"
	}
	if h.Scheme == "" {
		h.Scheme = corev1.URISchemeHTTP
	}
}

func volume(v *corev1.Volume) {
	if noneSet(&v.VolumeSource) {
		v.EmptyDir = &corev1.EmptyDirVolumeSource{}
	}
	vs := &v.VolumeSource
	if vs.Secret != nil && vs.Secret.DefaultMode == nil {
		vs.Secret.DefaultMode = ptr(corev1.SecretVolumeSourceDefaultMode)
	}
	if vs.ConfigMap != nil && vs.ConfigMap.DefaultMode == nil {
		vs.ConfigMap.DefaultMode = ptr(corev1.ConfigMapVolumeSourceDefaultMode)
	}
	if vs.DownwardAPI != nil {
		if vs.DownwardAPI.DefaultMode == nil {
			vs.DownwardAPI.DefaultMode = ptr(corev1.DownwardAPIVolumeSourceDefaultMode)
		}
		downwardAPIItems(vs.DownwardAPI.Items)
	}
	if vs.Projected != nil {
		if vs.Projected.DefaultMode == nil {
			vs.Projected.DefaultMode = ptr(corev1.ProjectedVolumeSourceDefaultMode)
		}
		for i := range vs.Projected.Sources {
			src := &vs.Projected.Sources[i]
			if src.DownwardAPI != nil {
				downwardAPIItems(src.DownwardAPI.Items)
			}
			if src.ServiceAccountToken != nil && src.ServiceAccountToken.ExpirationSeconds == nil {
				src.ServiceAccountToken.ExpirationSeconds = ptr(DefaultTokenExpirySeconds)
			}
		}
	}
	if vs.HostPath != nil && vs.HostPath.Type == nil {
		vs.HostPath.Type = ptr(corev1.HostPathUnset)
	}
}

func downwardAPIItems(items []corev1.DownwardAPIVolumeFile) {
	for i := range items {
		if f := items[i].FieldRef; f != nil && f.APIVersion == "" {
			f.APIVersion = "v1"
		}
	}
}

// noneSet reports whether every pointer field of the struct *v is nil: a
// volume that names no source at all is an emptyDir.
func noneSet(v any) bool {
	rv := reflect.ValueOf(v).Elem()
	for i := 0; i < rv.NumField(); i++ {
		if f := rv.Field(i); f.Kind() == reflect.Pointer && !f.IsNil() {
			return false
		}
	}
	return true
}

// requestsFromLimits makes a container that only states limits request
// exactly its limits, which is what the scheduler must reserve for it.
func requestsFromLimits(r *corev1.ResourceRequirements) {
	if r.Limits == nil {
		return
	}
	if r.Requests == nil {
		r.Requests = corev1.ResourceList{}
	}
	for name, q := range r.Limits {
		if _, ok := r.Requests[name]; !ok {
			r.Requests[name] = q.DeepCopy()
		}
	}
}

func hostNetworkPorts(cs []corev1.Container) {
	for i := range cs {
		for j := range cs[i].Ports {
			if cs[i].Ports[j].HostPort == 0 {
				cs[i].Ports[j].HostPort = cs[i].Ports[j].ContainerPort
			}
		}
	}
}

// defaultTolerations is Kubernetes' DefaultTolerationSeconds admission: a
// pod stays on a node that went NotReady or unreachable for five minutes
// before it is evicted, unless it already says how it tolerates that.
func defaultTolerations(s *corev1.PodSpec) {
	notReady, unreachable := false, false
	for _, t := range s.Tolerations {
		noExec := t.Effect == corev1.TaintEffectNoExecute || t.Effect == ""
		if !noExec {
			continue
		}
		if t.Key == TaintNodeNotReady || t.Key == "" {
			notReady = true
		}
		if t.Key == TaintNodeUnreachable || t.Key == "" {
			unreachable = true
		}
	}
	if !notReady {
		s.Tolerations = append(s.Tolerations, noExecuteToleration(TaintNodeNotReady))
	}
	if !unreachable {
		s.Tolerations = append(s.Tolerations, noExecuteToleration(TaintNodeUnreachable))
	}
}

func noExecuteToleration(key string) corev1.Toleration {
	return corev1.Toleration{
		Key:               key,
		Operator:          corev1.TolerationOpExists,
		Effect:            corev1.TaintEffectNoExecute,
		TolerationSeconds: ptr(DefaultTolerationSeconds),
	}
}

// roundUp rounds quantities up to milli precision: Kubernetes stores no
// finer value, so "0.0001" CPU reads back as "1m".
func roundUp(rl corev1.ResourceList) {
	for name, q := range rl {
		q.RoundUp(resource.Milli)
		rl[name] = q
	}
}
