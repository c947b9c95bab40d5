package validation

import (
	"fmt"
	"math"
	"net/netip"
	"reflect"
	"regexp"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/intstr"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

var (
	supportedProtocols      = []corev1.Protocol{corev1.ProtocolSCTP, corev1.ProtocolTCP, corev1.ProtocolUDP}
	supportedRestartPolicy  = []corev1.RestartPolicy{corev1.RestartPolicyAlways, corev1.RestartPolicyOnFailure, corev1.RestartPolicyNever}
	supportedDNSPolicy      = []corev1.DNSPolicy{corev1.DNSClusterFirstWithHostNet, corev1.DNSClusterFirst, corev1.DNSDefault, corev1.DNSNone}
	supportedPullPolicy     = []corev1.PullPolicy{corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever}
	supportedTermMsgPolicy  = []corev1.TerminationMessagePolicy{corev1.TerminationMessageReadFile, corev1.TerminationMessageFallbackToLogsOnError}
	supportedTaintEffects   = []corev1.TaintEffect{corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute}
	supportedURISchemes     = []corev1.URIScheme{corev1.URISchemeHTTP, corev1.URISchemeHTTPS}
	supportedMountProp      = []corev1.MountPropagationMode{corev1.MountPropagationNone, corev1.MountPropagationHostToContainer, corev1.MountPropagationBidirectional}
	supportedUnsatisfiable  = []corev1.UnsatisfiableConstraintAction{corev1.DoNotSchedule, corev1.ScheduleAnyway}
	supportedHostPathTypes  = []corev1.HostPathType{corev1.HostPathUnset, corev1.HostPathDirectoryOrCreate, corev1.HostPathDirectory, corev1.HostPathFileOrCreate, corev1.HostPathFile, corev1.HostPathSocket, corev1.HostPathCharDev, corev1.HostPathBlockDev}
	supportedResourceFields = []string{"limits.cpu", "limits.memory", "limits.ephemeral-storage", "requests.cpu", "requests.memory", "requests.ephemeral-storage"}
	supportedEnvFieldPaths  = []string{"metadata.name", "metadata.namespace", "metadata.uid", "spec.nodeName", "spec.serviceAccountName", "status.hostIP", "status.hostIPs", "status.podIP", "status.podIPs"}
	supportedVolFieldPaths  = []string{"metadata.annotations", "metadata.labels", "metadata.name", "metadata.namespace", "metadata.uid"}
)

func validatePodCreate(p *corev1.Pod, opts Options) field.ErrorList {
	errs := objectMeta(&p.ObjectMeta, true, nameIsDNSSubdomain)
	spec := field.NewPath("spec")
	errs = append(errs, validatePodSpec(&p.Spec, spec)...)
	if len(p.Spec.EphemeralContainers) > 0 {
		errs = append(errs, field.Forbidden(spec.Child("ephemeralContainers"), "cannot be set on create"))
	}
	return append(errs, ValidateImagesPolicy(&p.Spec, spec, opts.ImagePolicy())...)
}

// validatePodTemplate checks the pod template of a workload. Pods made from
// it always restart their containers and live until replaced.
func validatePodTemplate(t, old *corev1.PodTemplateSpec, path *field.Path, opts Options) field.ErrorList {
	var errs field.ErrorList
	mp := path.Child("metadata")
	errs = append(errs, metav1validation.ValidateLabels(t.Labels, mp.Child("labels"))...)
	errs = append(errs, apivalidation.ValidateAnnotations(t.Annotations, mp.Child("annotations"))...)
	sp := path.Child("spec")
	errs = append(errs, validatePodSpec(&t.Spec, sp)...)
	if t.Spec.RestartPolicy != "" && t.Spec.RestartPolicy != corev1.RestartPolicyAlways {
		errs = append(errs, field.NotSupported(sp.Child("restartPolicy"), t.Spec.RestartPolicy, []corev1.RestartPolicy{corev1.RestartPolicyAlways}))
	}
	if t.Spec.ActiveDeadlineSeconds != nil {
		errs = append(errs, field.Forbidden(sp.Child("activeDeadlineSeconds"), "activeDeadlineSeconds in ReplicaSet is not Supported"))
	}
	if len(t.Spec.EphemeralContainers) > 0 {
		errs = append(errs, field.Forbidden(sp.Child("ephemeralContainers"), "ephemeral containers not allowed in pod template"))
	}
	var oldSpec *corev1.PodSpec
	if old != nil {
		oldSpec = &old.Spec
	}
	return append(errs, validateImages(&t.Spec, oldSpec, sp, opts.ImagePolicy())...)
}

func validatePodSpec(s *corev1.PodSpec, path *field.Path) field.ErrorList {
	vols, errs := validateVolumes(s.Volumes, path.Child("volumes"))
	names := map[string]bool{}
	errs = append(errs, validateContainers(s.InitContainers, path.Child("initContainers"), vols, names, true)...)
	if len(s.Containers) == 0 {
		errs = append(errs, field.Required(path.Child("containers"), ""))
	}
	errs = append(errs, validateContainers(s.Containers, path.Child("containers"), vols, names, false)...)
	errs = append(errs, validateHostPorts(s, path)...)

	switch {
	case s.RestartPolicy == "":
		errs = append(errs, field.Required(path.Child("restartPolicy"), ""))
	case !oneOf(s.RestartPolicy, supportedRestartPolicy...):
		errs = append(errs, field.NotSupported(path.Child("restartPolicy"), s.RestartPolicy, supportedRestartPolicy))
	}
	errs = append(errs, validateDNS(s, path)...)
	errs = append(errs, metav1validation.ValidateLabels(s.NodeSelector, path.Child("nodeSelector"))...)
	if s.NodeName != "" {
		errs = dnsSubdomain(errs, path.Child("nodeName"), s.NodeName)
	}
	if s.ServiceAccountName != "" {
		errs = dnsSubdomain(errs, path.Child("serviceAccountName"), s.ServiceAccountName)
	}
	if s.Hostname != "" {
		errs = dnsLabel(errs, path.Child("hostname"), s.Hostname)
	}
	if s.Subdomain != "" {
		errs = dnsLabel(errs, path.Child("subdomain"), s.Subdomain)
	}
	if s.PriorityClassName != "" {
		errs = dnsSubdomain(errs, path.Child("priorityClassName"), s.PriorityClassName)
	}
	if d := s.ActiveDeadlineSeconds; d != nil && (*d < 1 || *d > math.MaxInt32) {
		errs = append(errs, field.Invalid(path.Child("activeDeadlineSeconds"), *d, utilvalidation.InclusiveRangeError(1, math.MaxInt32)))
	}
	errs = append(errs, validateTolerations(s.Tolerations, path.Child("tolerations"))...)
	errs = append(errs, validateAffinity(s.Affinity, path.Child("affinity"))...)
	errs = append(errs, validateTopologySpread(s.TopologySpreadConstraints, path.Child("topologySpreadConstraints"))...)
	errs = append(errs, validatePodSecurityContext(s.SecurityContext, path.Child("securityContext"))...)
	for i, sec := range s.ImagePullSecrets {
		if sec.Name != "" {
			errs = dnsSubdomain(errs, path.Child("imagePullSecrets").Index(i).Child("name"), sec.Name)
		}
	}
	gates := map[string]bool{}
	for i, g := range s.SchedulingGates {
		gp := path.Child("schedulingGates").Index(i).Child("name")
		errs = requireString(errs, gp, g.Name, qualifiedName)
		if gates[g.Name] {
			errs = append(errs, field.Duplicate(gp, g.Name))
		}
		gates[g.Name] = true
	}
	return errs
}

func validateDNS(s *corev1.PodSpec, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if s.DNSPolicy == "" {
		errs = append(errs, field.Required(path.Child("dnsPolicy"), ""))
	} else if !oneOf(s.DNSPolicy, supportedDNSPolicy...) {
		errs = append(errs, field.NotSupported(path.Child("dnsPolicy"), s.DNSPolicy, supportedDNSPolicy))
	}
	if s.DNSPolicy == corev1.DNSNone && s.DNSConfig == nil {
		errs = append(errs, field.Required(path.Child("dnsConfig"), "must provide `dnsConfig` when `dnsPolicy` is None"))
	}
	c := s.DNSConfig
	if c == nil {
		return errs
	}
	cp := path.Child("dnsConfig")
	if len(c.Nameservers) > 3 {
		errs = append(errs, field.Invalid(cp.Child("nameservers"), c.Nameservers, "must not have more than 3 nameservers"))
	}
	for i, ns := range c.Nameservers {
		if _, err := netip.ParseAddr(ns); err != nil {
			errs = append(errs, field.Invalid(cp.Child("nameservers").Index(i), ns, "must be a valid IP address"))
		}
	}
	if len(c.Searches) > 32 {
		errs = append(errs, field.Invalid(cp.Child("searches"), c.Searches, "must not have more than 32 search paths"))
	}
	for i, sd := range c.Searches {
		errs = dnsSubdomain(errs, cp.Child("searches").Index(i), strings.TrimSuffix(sd, "."))
	}
	for i, o := range c.Options {
		if o.Name == "" {
			errs = append(errs, field.Required(cp.Child("options").Index(i).Child("name"), "must not be empty"))
		}
	}
	return errs
}

// validateVolumes checks the pod's volumes and returns them by name for the
// volume mounts to refer to.
func validateVolumes(vols []corev1.Volume, path *field.Path) (map[string]*corev1.Volume, field.ErrorList) {
	var errs field.ErrorList
	byName := map[string]*corev1.Volume{}
	for i := range vols {
		v := &vols[i]
		vp := path.Index(i)
		np := vp.Child("name")
		switch {
		case v.Name == "":
			errs = append(errs, field.Required(np, ""))
		case byName[v.Name] != nil:
			errs = append(errs, field.Duplicate(np, v.Name))
		default:
			errs = dnsLabel(errs, np, v.Name)
			byName[v.Name] = v
		}
		errs = append(errs, validateVolumeSource(&v.VolumeSource, vp)...)
	}
	return byName, errs
}

func validateVolumeSource(vs *corev1.VolumeSource, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	set := setFields(vs)
	if len(set) == 0 {
		return append(errs, field.Required(path, "must specify a volume type"))
	}
	for _, extra := range set[1:] {
		errs = append(errs, field.Forbidden(path.Child(extra), "may not specify more than 1 volume type"))
	}
	if h := vs.HostPath; h != nil {
		hp := path.Child("hostPath")
		if h.Path == "" {
			errs = append(errs, field.Required(hp.Child("path"), ""))
		} else if hasDotDot(h.Path) {
			errs = append(errs, field.Invalid(hp.Child("path"), h.Path, "must not contain '..'"))
		}
		if h.Type != nil && !oneOf(*h.Type, supportedHostPathTypes...) {
			errs = append(errs, field.NotSupported(hp.Child("type"), *h.Type, supportedHostPathTypes))
		}
	}
	if e := vs.EmptyDir; e != nil && e.SizeLimit != nil && e.SizeLimit.Sign() < 0 {
		errs = append(errs, field.Invalid(path.Child("emptyDir", "sizeLimit"), e.SizeLimit.String(), "must be greater than or equal to 0"))
	}
	if sv := vs.Secret; sv != nil {
		sp := path.Child("secret")
		errs = requireString(errs, sp.Child("secretName"), sv.SecretName, dnsSubdomain)
		errs = append(errs, validateMode(sv.DefaultMode, sp.Child("defaultMode"))...)
		errs = append(errs, validateKeyToPaths(sv.Items, sp.Child("items"))...)
	}
	if cm := vs.ConfigMap; cm != nil {
		cp := path.Child("configMap")
		errs = requireString(errs, cp.Child("name"), cm.Name, dnsSubdomain)
		errs = append(errs, validateMode(cm.DefaultMode, cp.Child("defaultMode"))...)
		errs = append(errs, validateKeyToPaths(cm.Items, cp.Child("items"))...)
	}
	if d := vs.DownwardAPI; d != nil {
		dp := path.Child("downwardAPI")
		errs = append(errs, validateMode(d.DefaultMode, dp.Child("defaultMode"))...)
		errs = append(errs, validateDownwardAPIFiles(d.Items, dp.Child("items"))...)
	}
	if pr := vs.Projected; pr != nil {
		pp := path.Child("projected")
		errs = append(errs, validateMode(pr.DefaultMode, pp.Child("defaultMode"))...)
		for i := range pr.Sources {
			src := &pr.Sources[i]
			sp := pp.Child("sources").Index(i)
			set := setFields(src)
			if len(set) == 0 {
				errs = append(errs, field.Required(sp, "must specify exactly 1 projection source"))
			}
			for _, extra := range set[min(1, len(set)):] {
				errs = append(errs, field.Forbidden(sp.Child(extra), "may not specify more than 1 projection source"))
			}
			if src.Secret != nil {
				errs = append(errs, validateKeyToPaths(src.Secret.Items, sp.Child("secret", "items"))...)
			}
			if src.ConfigMap != nil {
				errs = append(errs, validateKeyToPaths(src.ConfigMap.Items, sp.Child("configMap", "items"))...)
			}
			if src.DownwardAPI != nil {
				errs = append(errs, validateDownwardAPIFiles(src.DownwardAPI.Items, sp.Child("downwardAPI", "items"))...)
			}
			if t := src.ServiceAccountToken; t != nil {
				tp := sp.Child("serviceAccountToken")
				errs = append(errs, validateRelativePath(t.Path, tp.Child("path"))...)
				if t.ExpirationSeconds != nil && *t.ExpirationSeconds < 600 {
					errs = append(errs, field.Invalid(tp.Child("expirationSeconds"), *t.ExpirationSeconds, "may not specify a duration less than 10 minutes"))
				}
			}
		}
	}
	if c := vs.PersistentVolumeClaim; c != nil && c.ClaimName == "" {
		errs = append(errs, field.Required(path.Child("persistentVolumeClaim", "claimName"), ""))
	}
	return errs
}

func validateMode(mode *int32, path *field.Path) field.ErrorList {
	if mode != nil && (*mode < 0 || *mode > 0o777) {
		return field.ErrorList{field.Invalid(path, *mode, "must be a number between 0 and 0777 (octal), both inclusive")}
	}
	return nil
}

func validateKeyToPaths(items []corev1.KeyToPath, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	for i, it := range items {
		ip := path.Index(i)
		errs = requireString(errs, ip.Child("key"), it.Key, nil)
		errs = append(errs, validateRelativePath(it.Path, ip.Child("path"))...)
		errs = append(errs, validateMode(it.Mode, ip.Child("mode"))...)
	}
	return errs
}

func validateDownwardAPIFiles(items []corev1.DownwardAPIVolumeFile, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	for i, it := range items {
		ip := path.Index(i)
		errs = append(errs, validateRelativePath(it.Path, ip.Child("path"))...)
		errs = append(errs, validateMode(it.Mode, ip.Child("mode"))...)
		switch {
		case it.FieldRef != nil && it.ResourceFieldRef != nil:
			errs = append(errs, field.Invalid(ip, "resource", "fieldRef and resourceFieldRef can not be specified simultaneously"))
		case it.FieldRef != nil:
			errs = append(errs, validateFieldRef(it.FieldRef, supportedVolFieldPaths, ip.Child("fieldRef"))...)
		case it.ResourceFieldRef != nil:
			errs = append(errs, validateResourceFieldRef(it.ResourceFieldRef, ip.Child("resourceFieldRef"))...)
		default:
			errs = append(errs, field.Required(ip, "one of fieldRef and resourceFieldRef is required"))
		}
	}
	return errs
}

// validateRelativePath keeps a file a volume projects inside the volume.
func validateRelativePath(p string, path *field.Path) field.ErrorList {
	switch {
	case p == "":
		return field.ErrorList{field.Required(path, "")}
	case strings.HasPrefix(p, "/"):
		return field.ErrorList{field.Invalid(path, p, "must be a relative path")}
	case hasDotDot(p):
		return field.ErrorList{field.Invalid(path, p, "must not contain '..'")}
	}
	return nil
}

func hasDotDot(p string) bool {
	for _, el := range strings.Split(p, "/") {
		if el == ".." {
			return true
		}
	}
	return false
}

// setFields lists, by JSON name and in declaration order, the pointer
// fields of the struct *v that are set: the members of a "one of" union.
func setFields(v any) []string {
	rv := reflect.ValueOf(v).Elem()
	rt := rv.Type()
	var set []string
	for i := 0; i < rv.NumField(); i++ {
		if f := rv.Field(i); f.Kind() == reflect.Pointer && !f.IsNil() {
			name, _, _ := strings.Cut(rt.Field(i).Tag.Get("json"), ",")
			set = append(set, name)
		}
	}
	return set
}

func validateContainers(cs []corev1.Container, path *field.Path, vols map[string]*corev1.Volume, names map[string]bool, init bool) field.ErrorList {
	var errs field.ErrorList
	for i := range cs {
		c := &cs[i]
		cp := path.Index(i)
		np := cp.Child("name")
		switch {
		case c.Name == "":
			errs = append(errs, field.Required(np, ""))
		case names[c.Name]:
			errs = append(errs, field.Duplicate(np, c.Name))
		default:
			errs = dnsLabel(errs, np, c.Name)
		}
		names[c.Name] = true

		ip := cp.Child("image")
		if c.Image == "" {
			errs = append(errs, field.Required(ip, ""))
		} else if strings.TrimSpace(c.Image) != c.Image {
			errs = append(errs, field.Invalid(ip, c.Image, "must not have leading or trailing whitespace"))
		}
		switch {
		case c.ImagePullPolicy == "":
			errs = append(errs, field.Required(cp.Child("imagePullPolicy"), ""))
		case !oneOf(c.ImagePullPolicy, supportedPullPolicy...):
			errs = append(errs, field.NotSupported(cp.Child("imagePullPolicy"), c.ImagePullPolicy, supportedPullPolicy))
		}
		if c.TerminationMessagePolicy != "" && !oneOf(c.TerminationMessagePolicy, supportedTermMsgPolicy...) {
			errs = append(errs, field.NotSupported(cp.Child("terminationMessagePolicy"), c.TerminationMessagePolicy, supportedTermMsgPolicy))
		}
		errs = append(errs, validateContainerPorts(c.Ports, cp.Child("ports"))...)
		errs = append(errs, validateEnv(c.Env, cp.Child("env"))...)
		errs = append(errs, validateEnvFrom(c.EnvFrom, cp.Child("envFrom"))...)
		errs = append(errs, validateVolumeMounts(c, vols, cp.Child("volumeMounts"))...)
		errs = append(errs, validateResources(&c.Resources, cp.Child("resources"))...)
		errs = append(errs, validateContainerSecurityContext(c.SecurityContext, cp.Child("securityContext"))...)

		sidecar := false
		if rp := c.RestartPolicy; rp != nil {
			switch {
			case !init:
				errs = append(errs, field.Forbidden(cp.Child("restartPolicy"), "may not be set for non-init containers"))
			case *rp != corev1.ContainerRestartPolicyAlways:
				errs = append(errs, field.NotSupported(cp.Child("restartPolicy"), *rp, []corev1.ContainerRestartPolicy{corev1.ContainerRestartPolicyAlways}))
			default:
				sidecar = true
			}
		}
		if init && !sidecar {
			// A plain init container runs to completion: nothing may
			// probe or hook it.
			for _, f := range []struct {
				name string
				set  bool
			}{{"lifecycle", c.Lifecycle != nil}, {"livenessProbe", c.LivenessProbe != nil}, {"readinessProbe", c.ReadinessProbe != nil}, {"startupProbe", c.StartupProbe != nil}} {
				if f.set {
					errs = append(errs, field.Forbidden(cp.Child(f.name), "may not be set for init containers without restartPolicy=Always"))
				}
			}
			continue
		}
		errs = append(errs, validateProbe(c.LivenessProbe, cp.Child("livenessProbe"), true)...)
		errs = append(errs, validateProbe(c.ReadinessProbe, cp.Child("readinessProbe"), false)...)
		errs = append(errs, validateProbe(c.StartupProbe, cp.Child("startupProbe"), true)...)
		if l := c.Lifecycle; l != nil {
			if l.PostStart != nil {
				errs = append(errs, validateLifecycleHandler(l.PostStart, cp.Child("lifecycle", "postStart"))...)
			}
			if l.PreStop != nil {
				errs = append(errs, validateLifecycleHandler(l.PreStop, cp.Child("lifecycle", "preStop"))...)
			}
		}
	}
	return errs
}

func validateContainerPorts(ports []corev1.ContainerPort, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	names := map[string]bool{}
	for i, p := range ports {
		pp := path.Index(i)
		if p.Name != "" {
			errs = appendMsgs(errs, pp.Child("name"), p.Name, utilvalidation.IsValidPortName(p.Name))
			if names[p.Name] {
				errs = append(errs, field.Duplicate(pp.Child("name"), p.Name))
			}
			names[p.Name] = true
		}
		if p.ContainerPort == 0 {
			errs = append(errs, field.Required(pp.Child("containerPort"), ""))
		} else {
			errs = appendMsgs(errs, pp.Child("containerPort"), p.ContainerPort, utilvalidation.IsValidPortNum(int(p.ContainerPort)))
		}
		if p.HostPort != 0 {
			errs = appendMsgs(errs, pp.Child("hostPort"), p.HostPort, utilvalidation.IsValidPortNum(int(p.HostPort)))
		}
		errs = append(errs, validateProtocol(p.Protocol, pp.Child("protocol"))...)
		if p.HostIP != "" {
			if _, err := netip.ParseAddr(p.HostIP); err != nil {
				errs = append(errs, field.Invalid(pp.Child("hostIP"), p.HostIP, "must be a valid IP address"))
			}
		}
	}
	return errs
}

func validateProtocol(p corev1.Protocol, path *field.Path) field.ErrorList {
	switch {
	case p == "":
		return field.ErrorList{field.Required(path, "")}
	case !oneOf(p, supportedProtocols...):
		return field.ErrorList{field.NotSupported(path, p, supportedProtocols)}
	}
	return nil
}

// validateHostPorts refuses two containers of one pod that want the same
// port of the node.
func validateHostPorts(s *corev1.PodSpec, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	seen := map[string]bool{}
	check := func(cs []corev1.Container, cpath *field.Path) {
		for i, c := range cs {
			for j, p := range c.Ports {
				pp := cpath.Index(i).Child("ports").Index(j)
				if s.HostNetwork && p.HostPort != 0 && p.HostPort != p.ContainerPort {
					errs = append(errs, field.Invalid(pp.Child("hostPort"), p.HostPort, "must match `containerPort` when `hostNetwork` is true"))
				}
				if p.HostPort == 0 {
					continue
				}
				key := fmt.Sprintf("%s/%s/%d", p.Protocol, p.HostIP, p.HostPort)
				if seen[key] {
					errs = append(errs, field.Duplicate(pp.Child("hostPort"), key))
				}
				seen[key] = true
			}
		}
	}
	check(s.InitContainers, path.Child("initContainers"))
	check(s.Containers, path.Child("containers"))
	return errs
}

var labelOrAnnotationRef = regexp.MustCompile(`^metadata\.(labels|annotations)\['([^']*)'\]$`)

func validateEnv(env []corev1.EnvVar, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	for i, ev := range env {
		ep := path.Index(i)
		if ev.Name == "" {
			errs = append(errs, field.Required(ep.Child("name"), ""))
		} else {
			errs = appendMsgs(errs, ep.Child("name"), ev.Name, utilvalidation.IsRelaxedEnvVarName(ev.Name))
		}
		vf := ev.ValueFrom
		if vf == nil {
			continue
		}
		vp := ep.Child("valueFrom")
		switch n := len(setFields(vf)); {
		case n == 0:
			errs = append(errs, field.Invalid(vp, "", "must specify one of: `fieldRef`, `resourceFieldRef`, `configMapKeyRef` or `secretKeyRef`"))
		case n > 1:
			errs = append(errs, field.Invalid(vp, "", "may not have more than one field specified at a time"))
		}
		if ev.Value != "" {
			errs = append(errs, field.Invalid(vp, "", "may not be specified when `value` is not empty"))
		}
		if vf.FieldRef != nil {
			errs = append(errs, validateFieldRef(vf.FieldRef, supportedEnvFieldPaths, vp.Child("fieldRef"))...)
		}
		if vf.ResourceFieldRef != nil {
			errs = append(errs, validateResourceFieldRef(vf.ResourceFieldRef, vp.Child("resourceFieldRef"))...)
		}
		if r := vf.ConfigMapKeyRef; r != nil {
			errs = append(errs, validateKeyRef(r.Name, r.Key, vp.Child("configMapKeyRef"))...)
		}
		if r := vf.SecretKeyRef; r != nil {
			errs = append(errs, validateKeyRef(r.Name, r.Key, vp.Child("secretKeyRef"))...)
		}
	}
	return errs
}

func validateKeyRef(name, key string, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	errs = requireString(errs, path.Child("name"), name, dnsSubdomain)
	return requireString(errs, path.Child("key"), key, func(errs field.ErrorList, p *field.Path, v string) field.ErrorList {
		return appendMsgs(errs, p, v, utilvalidation.IsConfigMapKey(v))
	})
}

func validateFieldRef(r *corev1.ObjectFieldSelector, supported []string, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if r.APIVersion == "" {
		errs = append(errs, field.Required(path.Child("apiVersion"), ""))
	} else if r.APIVersion != "v1" {
		errs = append(errs, field.Invalid(path.Child("apiVersion"), r.APIVersion, `unsupported version: only "v1" has pod fields`))
	}
	fp := path.Child("fieldPath")
	if r.FieldPath == "" {
		return append(errs, field.Required(fp, ""))
	}
	if m := labelOrAnnotationRef.FindStringSubmatch(r.FieldPath); m != nil {
		return qualifiedName(errs, fp, strings.ToLower(m[2]))
	}
	if !oneOf(r.FieldPath, supported...) {
		errs = append(errs, field.NotSupported(fp, r.FieldPath, supported))
	}
	return errs
}

func validateResourceFieldRef(r *corev1.ResourceFieldSelector, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if r.Resource == "" {
		return append(errs, field.Required(path.Child("resource"), ""))
	}
	if !oneOf(r.Resource, supportedResourceFields...) {
		errs = append(errs, field.NotSupported(path.Child("resource"), r.Resource, supportedResourceFields))
	}
	if r.Divisor.Sign() < 0 {
		errs = append(errs, field.Invalid(path.Child("divisor"), r.Divisor.String(), "must be greater than 0"))
	}
	return errs
}

func validateEnvFrom(srcs []corev1.EnvFromSource, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	for i, s := range srcs {
		sp := path.Index(i)
		if s.Prefix != "" {
			errs = appendMsgs(errs, sp.Child("prefix"), s.Prefix, utilvalidation.IsRelaxedEnvVarName(s.Prefix))
		}
		switch {
		case s.ConfigMapRef != nil && s.SecretRef != nil:
			errs = append(errs, field.Invalid(sp, "", "may not have more than one field specified at a time"))
		case s.ConfigMapRef != nil:
			errs = requireString(errs, sp.Child("configMapRef", "name"), s.ConfigMapRef.Name, dnsSubdomain)
		case s.SecretRef != nil:
			errs = requireString(errs, sp.Child("secretRef", "name"), s.SecretRef.Name, dnsSubdomain)
		default:
			errs = append(errs, field.Invalid(sp, "", "must specify one of: `configMapRef` or `secretRef`"))
		}
	}
	return errs
}

func validateVolumeMounts(c *corev1.Container, vols map[string]*corev1.Volume, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	paths := map[string]bool{}
	for i, m := range c.VolumeMounts {
		mp := path.Index(i)
		if m.Name == "" {
			errs = append(errs, field.Required(mp.Child("name"), ""))
		} else if vols[m.Name] == nil {
			errs = append(errs, field.NotFound(mp.Child("name"), m.Name))
		}
		if m.MountPath == "" {
			errs = append(errs, field.Required(mp.Child("mountPath"), ""))
		} else if paths[m.MountPath] {
			errs = append(errs, field.Invalid(mp.Child("mountPath"), m.MountPath, "must be unique"))
		}
		paths[m.MountPath] = true
		if m.SubPath != "" {
			if strings.HasPrefix(m.SubPath, "/") {
				errs = append(errs, field.Invalid(mp.Child("subPath"), m.SubPath, "must be a relative path"))
			} else if hasDotDot(m.SubPath) {
				errs = append(errs, field.Invalid(mp.Child("subPath"), m.SubPath, "must not contain '..'"))
			}
			if m.SubPathExpr != "" {
				errs = append(errs, field.Invalid(mp.Child("subPathExpr"), m.SubPathExpr, "subPathExpr and subPath are mutually exclusive"))
			}
		}
		if mode := m.MountPropagation; mode != nil {
			switch {
			case !oneOf(*mode, supportedMountProp...):
				errs = append(errs, field.NotSupported(mp.Child("mountPropagation"), *mode, supportedMountProp))
			case *mode == corev1.MountPropagationBidirectional && !privileged(c):
				errs = append(errs, field.Forbidden(mp.Child("mountPropagation"), "Bidirectional mount propagation is available only to privileged containers"))
			}
		}
	}
	return errs
}

func privileged(c *corev1.Container) bool {
	return c.SecurityContext != nil && c.SecurityContext.Privileged != nil && *c.SecurityContext.Privileged
}

// Resource names a container may ask for without a domain prefix.
var standardContainerResources = []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourceEphemeralStorage}

func validateResources(r *corev1.ResourceRequirements, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	lp, rp := path.Child("limits"), path.Child("requests")
	errs = append(errs, validateResourceList(r.Limits, lp)...)
	errs = append(errs, validateResourceList(r.Requests, rp)...)
	for _, name := range sortedKeys(r.Requests) {
		rn := corev1.ResourceName(name)
		req := r.Requests[rn]
		lim, hasLimit := r.Limits[rn]
		switch {
		case extendedResource(rn) && !hasLimit:
			errs = append(errs, field.Required(lp.Key(name), "Limit must be set for non overcommitable resources"))
		case extendedResource(rn) && req.Cmp(lim) != 0:
			errs = append(errs, field.Invalid(rp.Key(name), req.String(), fmt.Sprintf("must be equal to %s limit of %s", name, lim.String())))
		case hasLimit && req.Cmp(lim) > 0:
			errs = append(errs, field.Invalid(rp.Key(name), req.String(), fmt.Sprintf("must be less than or equal to %s limit of %s", name, lim.String())))
		}
	}
	return errs
}

func validateResourceList(rl corev1.ResourceList, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	for _, name := range sortedKeys(rl) {
		rn := corev1.ResourceName(name)
		kp := path.Key(name)
		errs = qualifiedName(errs, kp, name)
		if !oneOf(rn, standardContainerResources...) && !strings.HasPrefix(name, corev1.ResourceHugePagesPrefix) && !extendedResource(rn) {
			errs = append(errs, field.Invalid(kp, name, "must be a standard resource for containers"))
		}
		q := rl[rn]
		if q.Sign() < 0 {
			errs = append(errs, field.Invalid(kp, q.String(), "must be greater than or equal to 0"))
		}
		if extendedResource(rn) && q.MilliValue()%1000 != 0 {
			errs = append(errs, field.Invalid(kp, q.String(), "must be an integer"))
		}
	}
	return errs
}

// extendedResource is a domain-prefixed resource outside kubernetes.io
// (a GPU, a serial port): it cannot be overcommitted.
func extendedResource(name corev1.ResourceName) bool {
	s := string(name)
	return strings.Contains(s, "/") && !strings.Contains(s, corev1.ResourceDefaultNamespacePrefix) &&
		!strings.HasPrefix(s, corev1.DefaultResourceRequestsPrefix)
}

func validateProbe(p *corev1.Probe, path *field.Path, successMustBeOne bool) field.ErrorList {
	if p == nil {
		return nil
	}
	errs := validateHandler(path, map[string]bool{
		"exec": p.Exec != nil, "httpGet": p.HTTPGet != nil, "tcpSocket": p.TCPSocket != nil, "grpc": p.GRPC != nil,
	}, p.Exec, p.HTTPGet, p.TCPSocket)
	if p.GRPC != nil {
		errs = appendMsgs(errs, path.Child("grpc", "port"), p.GRPC.Port, utilvalidation.IsValidPortNum(int(p.GRPC.Port)))
	}
	errs = nonNegative(errs, path.Child("initialDelaySeconds"), int64(p.InitialDelaySeconds))
	errs = nonNegative(errs, path.Child("timeoutSeconds"), int64(p.TimeoutSeconds))
	errs = nonNegative(errs, path.Child("periodSeconds"), int64(p.PeriodSeconds))
	errs = nonNegative(errs, path.Child("successThreshold"), int64(p.SuccessThreshold))
	errs = nonNegative(errs, path.Child("failureThreshold"), int64(p.FailureThreshold))
	if successMustBeOne && p.SuccessThreshold != 1 {
		errs = append(errs, field.Invalid(path.Child("successThreshold"), p.SuccessThreshold, "must be 1"))
	}
	if g := p.TerminationGracePeriodSeconds; g != nil && *g <= 0 {
		errs = append(errs, field.Invalid(path.Child("terminationGracePeriodSeconds"), *g, "must be greater than 0"))
	}
	return errs
}

func validateLifecycleHandler(h *corev1.LifecycleHandler, path *field.Path) field.ErrorList {
	errs := validateHandler(path, map[string]bool{
		"exec": h.Exec != nil, "httpGet": h.HTTPGet != nil, "tcpSocket": h.TCPSocket != nil, "sleep": h.Sleep != nil,
	}, h.Exec, h.HTTPGet, h.TCPSocket)
	if h.Sleep != nil {
		errs = nonNegative(errs, path.Child("sleep", "seconds"), h.Sleep.Seconds)
	}
	return errs
}

// handlerOrder fixes which handler counts as "the" one when several are
// set, so that the Forbidden errors name the extra ones.
var handlerOrder = []string{"exec", "httpGet", "tcpSocket", "grpc", "sleep"}

func validateHandler(path *field.Path, set map[string]bool, exec *corev1.ExecAction, get *corev1.HTTPGetAction, tcp *corev1.TCPSocketAction) field.ErrorList {
	var errs field.ErrorList
	n := 0
	for _, h := range handlerOrder {
		if !set[h] {
			continue
		}
		if n > 0 {
			errs = append(errs, field.Forbidden(path.Child(h), "may not specify more than 1 handler type"))
		}
		n++
	}
	if n == 0 {
		return append(errs, field.Required(path, "must specify a handler type"))
	}
	if exec != nil && len(exec.Command) == 0 {
		errs = append(errs, field.Required(path.Child("exec", "command"), ""))
	}
	if get != nil {
		gp := path.Child("httpGet")
		errs = requireString(errs, gp.Child("path"), get.Path, nil)
		errs = append(errs, validatePortNumOrName(get.Port, gp.Child("port"))...)
		if !oneOf(get.Scheme, supportedURISchemes...) {
			errs = append(errs, field.NotSupported(gp.Child("scheme"), get.Scheme, supportedURISchemes))
		}
		for i, h := range get.HTTPHeaders {
			errs = appendMsgs(errs, gp.Child("httpHeaders").Index(i).Child("name"), h.Name, utilvalidation.IsHTTPHeaderName(h.Name))
		}
	}
	if tcp != nil {
		errs = append(errs, validatePortNumOrName(tcp.Port, path.Child("tcpSocket", "port"))...)
	}
	return errs
}

func validatePortNumOrName(p intstr.IntOrString, path *field.Path) field.ErrorList {
	switch p.Type {
	case intstr.Int:
		return appendMsgs(nil, path, p.IntValue(), utilvalidation.IsValidPortNum(p.IntValue()))
	case intstr.String:
		return appendMsgs(nil, path, p.StrVal, utilvalidation.IsValidPortName(p.StrVal))
	}
	return field.ErrorList{field.InternalError(path, fmt.Errorf("unknown type: %v", p.Type))}
}

func validateTolerations(tols []corev1.Toleration, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	for i, t := range tols {
		tp := path.Index(i)
		if t.Key != "" {
			errs = qualifiedName(errs, tp.Child("key"), t.Key)
		}
		if t.Key == "" && t.Operator != corev1.TolerationOpExists {
			errs = append(errs, field.Invalid(tp.Child("operator"), t.Operator, "operator must be Exists when `key` is empty, which means \"match all values and all keys\""))
		}
		if t.TolerationSeconds != nil && t.Effect != corev1.TaintEffectNoExecute {
			errs = append(errs, field.Invalid(tp.Child("effect"), t.Effect, "effect must be 'NoExecute' when `tolerationSeconds` is set"))
		}
		switch t.Operator {
		case corev1.TolerationOpEqual, "":
			errs = labelValue(errs, tp.Child("value"), t.Value)
		case corev1.TolerationOpExists:
			if t.Value != "" {
				errs = append(errs, field.Invalid(tp.Child("value"), t.Value, "value must be empty when `operator` is 'Exists'"))
			}
		default:
			errs = append(errs, field.NotSupported(tp.Child("operator"), t.Operator, []corev1.TolerationOperator{corev1.TolerationOpEqual, corev1.TolerationOpExists}))
		}
		if t.Effect != "" && !oneOf(t.Effect, supportedTaintEffects...) {
			errs = append(errs, field.NotSupported(tp.Child("effect"), t.Effect, supportedTaintEffects))
		}
	}
	return errs
}

func validateAffinity(a *corev1.Affinity, path *field.Path) field.ErrorList {
	if a == nil {
		return nil
	}
	var errs field.ErrorList
	if na := a.NodeAffinity; na != nil {
		np := path.Child("nodeAffinity")
		if r := na.RequiredDuringSchedulingIgnoredDuringExecution; r != nil {
			rp := np.Child("requiredDuringSchedulingIgnoredDuringExecution")
			if len(r.NodeSelectorTerms) == 0 {
				errs = append(errs, field.Required(rp.Child("nodeSelectorTerms"), "must have at least one node selector term"))
			}
			for i := range r.NodeSelectorTerms {
				errs = append(errs, validateNodeSelectorTerm(&r.NodeSelectorTerms[i], rp.Child("nodeSelectorTerms").Index(i))...)
			}
		}
		for i, p := range na.PreferredDuringSchedulingIgnoredDuringExecution {
			pp := np.Child("preferredDuringSchedulingIgnoredDuringExecution").Index(i)
			errs = validateWeight(errs, pp.Child("weight"), p.Weight)
			errs = append(errs, validateNodeSelectorTerm(&p.Preference, pp.Child("preference"))...)
		}
	}
	if pa := a.PodAffinity; pa != nil {
		errs = append(errs, validatePodAffinityTerms(pa.RequiredDuringSchedulingIgnoredDuringExecution, pa.PreferredDuringSchedulingIgnoredDuringExecution, path.Child("podAffinity"))...)
	}
	if pa := a.PodAntiAffinity; pa != nil {
		errs = append(errs, validatePodAffinityTerms(pa.RequiredDuringSchedulingIgnoredDuringExecution, pa.PreferredDuringSchedulingIgnoredDuringExecution, path.Child("podAntiAffinity"))...)
	}
	return errs
}

func validateWeight(errs field.ErrorList, path *field.Path, w int32) field.ErrorList {
	if w < 1 || w > 100 {
		errs = append(errs, field.Invalid(path, w, "must be in the range 1-100"))
	}
	return errs
}

func validateNodeSelectorTerm(t *corev1.NodeSelectorTerm, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	for i, r := range t.MatchExpressions {
		rp := path.Child("matchExpressions").Index(i)
		errs = qualifiedName(errs, rp.Child("key"), r.Key)
		errs = append(errs, validateSelectorOperator(r.Operator, r.Values, rp)...)
	}
	for i, r := range t.MatchFields {
		rp := path.Child("matchFields").Index(i)
		if r.Key != "metadata.name" {
			errs = append(errs, field.NotSupported(rp.Child("key"), r.Key, []string{"metadata.name"}))
		}
		if r.Operator != corev1.NodeSelectorOpIn && r.Operator != corev1.NodeSelectorOpNotIn {
			errs = append(errs, field.NotSupported(rp.Child("operator"), r.Operator, []corev1.NodeSelectorOperator{corev1.NodeSelectorOpIn, corev1.NodeSelectorOpNotIn}))
		} else if len(r.Values) != 1 {
			errs = append(errs, field.Required(rp.Child("values"), "must be only one value when `operator` is 'In' or 'NotIn' for node field selector"))
		}
	}
	return errs
}

func validateSelectorOperator(op corev1.NodeSelectorOperator, values []string, path *field.Path) field.ErrorList {
	vp := path.Child("values")
	switch op {
	case corev1.NodeSelectorOpIn, corev1.NodeSelectorOpNotIn:
		if len(values) == 0 {
			return field.ErrorList{field.Required(vp, "must be specified when `operator` is 'In' or 'NotIn'")}
		}
	case corev1.NodeSelectorOpExists, corev1.NodeSelectorOpDoesNotExist:
		if len(values) > 0 {
			return field.ErrorList{field.Forbidden(vp, "may not be specified when `operator` is 'Exists' or 'DoesNotExist'")}
		}
	case corev1.NodeSelectorOpGt, corev1.NodeSelectorOpLt:
		if len(values) != 1 {
			return field.ErrorList{field.Required(vp, "must be specified single value when `operator` is 'Lt' or 'Gt'")}
		}
		if _, err := resource.ParseQuantity(values[0]); err != nil || strings.ContainsAny(values[0], ".eEkKmMgGtTpPi") {
			return field.ErrorList{field.Invalid(vp.Index(0), values[0], "must be an integer")}
		}
	default:
		return field.ErrorList{field.Invalid(path.Child("operator"), op, "not a valid selector operator")}
	}
	return nil
}

func validatePodAffinityTerms(req []corev1.PodAffinityTerm, pref []corev1.WeightedPodAffinityTerm, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	term := func(t *corev1.PodAffinityTerm, tp *field.Path) {
		errs = requireString(errs, tp.Child("topologyKey"), t.TopologyKey, qualifiedName)
		opts := metav1validation.LabelSelectorValidationOptions{}
		if t.LabelSelector != nil {
			errs = append(errs, metav1validation.ValidateLabelSelector(t.LabelSelector, opts, tp.Child("labelSelector"))...)
		}
		if t.NamespaceSelector != nil {
			errs = append(errs, metav1validation.ValidateLabelSelector(t.NamespaceSelector, opts, tp.Child("namespaceSelector"))...)
		}
		for i, ns := range t.Namespaces {
			errs = dnsLabel(errs, tp.Child("namespaces").Index(i), ns)
		}
	}
	for i := range req {
		term(&req[i], path.Child("requiredDuringSchedulingIgnoredDuringExecution").Index(i))
	}
	for i := range pref {
		pp := path.Child("preferredDuringSchedulingIgnoredDuringExecution").Index(i)
		errs = validateWeight(errs, pp.Child("weight"), pref[i].Weight)
		term(&pref[i].PodAffinityTerm, pp.Child("podAffinityTerm"))
	}
	return errs
}

func validateTopologySpread(cs []corev1.TopologySpreadConstraint, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	seen := map[string]bool{}
	for i, c := range cs {
		cp := path.Index(i)
		if c.MaxSkew <= 0 {
			errs = append(errs, field.Invalid(cp.Child("maxSkew"), c.MaxSkew, "must be greater than zero"))
		}
		errs = requireString(errs, cp.Child("topologyKey"), c.TopologyKey, qualifiedName)
		if !oneOf(c.WhenUnsatisfiable, supportedUnsatisfiable...) {
			errs = append(errs, field.NotSupported(cp.Child("whenUnsatisfiable"), c.WhenUnsatisfiable, supportedUnsatisfiable))
		}
		if c.MinDomains != nil {
			if *c.MinDomains <= 0 {
				errs = append(errs, field.Invalid(cp.Child("minDomains"), *c.MinDomains, "must be greater than 0"))
			} else if c.WhenUnsatisfiable != corev1.DoNotSchedule {
				errs = append(errs, field.Invalid(cp.Child("minDomains"), *c.MinDomains, "can only use minDomains if whenUnsatisfiable=DoNotSchedule"))
			}
		}
		if c.LabelSelector != nil {
			errs = append(errs, metav1validation.ValidateLabelSelector(c.LabelSelector, metav1validation.LabelSelectorValidationOptions{}, cp.Child("labelSelector"))...)
		}
		key := c.TopologyKey + "/" + string(c.WhenUnsatisfiable)
		if seen[key] {
			errs = append(errs, field.Duplicate(cp, fmt.Sprintf("{%v, %v}", c.TopologyKey, c.WhenUnsatisfiable)))
		}
		seen[key] = true
	}
	return errs
}

func validatePodSecurityContext(sc *corev1.PodSecurityContext, path *field.Path) field.ErrorList {
	if sc == nil {
		return nil
	}
	var errs field.ErrorList
	errs = validateID(errs, path.Child("runAsUser"), sc.RunAsUser, utilvalidation.IsValidUserID)
	errs = validateID(errs, path.Child("runAsGroup"), sc.RunAsGroup, utilvalidation.IsValidGroupID)
	errs = validateID(errs, path.Child("fsGroup"), sc.FSGroup, utilvalidation.IsValidGroupID)
	for i, g := range sc.SupplementalGroups {
		errs = appendMsgs(errs, path.Child("supplementalGroups").Index(i), g, utilvalidation.IsValidGroupID(g))
	}
	return errs
}

func validateContainerSecurityContext(sc *corev1.SecurityContext, path *field.Path) field.ErrorList {
	if sc == nil {
		return nil
	}
	var errs field.ErrorList
	errs = validateID(errs, path.Child("runAsUser"), sc.RunAsUser, utilvalidation.IsValidUserID)
	errs = validateID(errs, path.Child("runAsGroup"), sc.RunAsGroup, utilvalidation.IsValidGroupID)
	if sc.Privileged != nil && *sc.Privileged && sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation {
		errs = append(errs, field.Invalid(path, sc, "cannot set `allowPrivilegeEscalation` to false and `privileged` to true"))
	}
	return errs
}

func validateID(errs field.ErrorList, path *field.Path, id *int64, check func(int64) []string) field.ErrorList {
	if id == nil {
		return errs
	}
	return appendMsgs(errs, path, *id, check(*id))
}
