package validation

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

func TestValidatePodCreate(t *testing.T) {
	big := strings.Repeat("x", 300*1024)
	cases := []struct {
		name   string
		mutate func(p *corev1.Pod)
		opts   Options
		want   []want
	}{
		{name: "valid", mutate: func(p *corev1.Pod) {}},
		{name: "no name", mutate: func(p *corev1.Pod) { p.Name = "" }, want: []want{required("metadata.name")}},
		{name: "bad name", mutate: func(p *corev1.Pod) { p.Name = "Web!" }, want: []want{invalid("metadata.name")}},
		{name: "bad generateName", mutate: func(p *corev1.Pod) { p.GenerateName = "web_" }, want: []want{invalid("metadata.generateName")}},
		{name: "no namespace", mutate: func(p *corev1.Pod) { p.Namespace = "" }, want: []want{required("metadata.namespace")}},
		{name: "bad namespace", mutate: func(p *corev1.Pod) { p.Namespace = "Prod" }, want: []want{invalid("metadata.namespace")}},
		{name: "bad label key", mutate: func(p *corev1.Pod) { p.Labels["-x"] = "y" }, want: []want{invalid("metadata.labels")}},
		{name: "bad label value", mutate: func(p *corev1.Pod) { p.Labels["x"] = "a b" }, want: []want{invalid("metadata.labels")}},
		{name: "annotations too big", mutate: func(p *corev1.Pod) { p.Annotations = map[string]string{"a": big} }, want: []want{tooLong("metadata.annotations")}},
		{name: "no containers", mutate: func(p *corev1.Pod) { p.Spec.Containers = nil }, want: []want{required("spec.containers")}},
		{name: "no container name", mutate: func(p *corev1.Pod) { p.Spec.Containers[0].Name = "" }, want: []want{required("spec.containers[0].name")}},
		{name: "bad container name", mutate: func(p *corev1.Pod) { p.Spec.Containers[0].Name = "App_1" }, want: []want{invalid("spec.containers[0].name")}},
		{name: "container name used by init container", mutate: func(p *corev1.Pod) {
			p.Spec.InitContainers = []corev1.Container{initContainer("app")}
		}, want: []want{duplicate("spec.containers[0].name")}},
		{name: "duplicate container names", mutate: func(p *corev1.Pod) {
			c := p.Spec.Containers[0]
			c.Ports = nil
			p.Spec.Containers = append(p.Spec.Containers, c)
		}, want: []want{duplicate("spec.containers[1].name")}},
		{name: "no image", mutate: func(p *corev1.Pod) { p.Spec.Containers[0].Image = "" }, want: []want{required("spec.containers[0].image")}},
		{name: "image with spaces", mutate: func(p *corev1.Pod) { p.Spec.Containers[0].Image = " " + image }, want: []want{invalid("spec.containers[0].image"), invalid("spec.containers[0].image")}},
		{name: "tag image refused", mutate: func(p *corev1.Pod) { p.Spec.Containers[0].Image = "registry.local/app:1.0" }, want: []want{invalid("spec.containers[0].image")}},
		{name: "tag image allowed", opts: Options{AllowTagImages: true}, mutate: func(p *corev1.Pod) { p.Spec.Containers[0].Image = "registry.local/app:1.0" }},
		{name: "tag image in init container", mutate: func(p *corev1.Pod) {
			c := initContainer("setup")
			c.Image = "busybox"
			p.Spec.InitContainers = []corev1.Container{c}
		}, want: []want{invalid("spec.initContainers[0].image")}},
		{name: "bad pull policy", mutate: func(p *corev1.Pod) { p.Spec.Containers[0].ImagePullPolicy = "Sometimes" }, want: []want{notSupported("spec.containers[0].imagePullPolicy")}},
		{name: "port zero", mutate: func(p *corev1.Pod) { p.Spec.Containers[0].Ports[0].ContainerPort = 0 }, want: []want{required("spec.containers[0].ports[0].containerPort")}},
		{name: "port too high", mutate: func(p *corev1.Pod) { p.Spec.Containers[0].Ports[0].ContainerPort = 70000 }, want: []want{invalid("spec.containers[0].ports[0].containerPort")}},
		{name: "host port too high", mutate: func(p *corev1.Pod) { p.Spec.Containers[0].Ports[0].HostPort = 65536 }, want: []want{invalid("spec.containers[0].ports[0].hostPort")}},
		{name: "bad port name", mutate: func(p *corev1.Pod) { p.Spec.Containers[0].Ports[0].Name = "http-endpoint-long" }, want: []want{invalid("spec.containers[0].ports[0].name")}},
		{name: "duplicate port name", mutate: func(p *corev1.Pod) {
			p.Spec.Containers[0].Ports = append(p.Spec.Containers[0].Ports, corev1.ContainerPort{Name: "http", ContainerPort: 9090, Protocol: corev1.ProtocolTCP})
		}, want: []want{duplicate("spec.containers[0].ports[1].name")}},
		{name: "bad protocol", mutate: func(p *corev1.Pod) { p.Spec.Containers[0].Ports[0].Protocol = "ICMP" }, want: []want{notSupported("spec.containers[0].ports[0].protocol")}},
		{name: "no protocol", mutate: func(p *corev1.Pod) { p.Spec.Containers[0].Ports[0].Protocol = "" }, want: []want{required("spec.containers[0].ports[0].protocol")}},
		{name: "host port used twice", mutate: func(p *corev1.Pod) {
			p.Spec.Containers[0].Ports[0].HostPort = 80
			c := sidecar("proxy")
			c.Ports = []corev1.ContainerPort{{ContainerPort: 81, HostPort: 80, Protocol: corev1.ProtocolTCP}}
			p.Spec.Containers = append(p.Spec.Containers, c)
		}, want: []want{duplicate("spec.containers[1].ports[0].hostPort")}},
		{name: "host network port mismatch", mutate: func(p *corev1.Pod) {
			p.Spec.HostNetwork = true
			p.Spec.Containers[0].Ports[0].HostPort = 80
		}, want: []want{invalid("spec.containers[0].ports[0].hostPort")}},
		{name: "requests above limits", mutate: func(p *corev1.Pod) {
			p.Spec.Containers[0].Resources = corev1.ResourceRequirements{
				Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m")},
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")},
			}
		}, want: []want{invalid("spec.containers[0].resources.requests[cpu]")}},
		{name: "negative memory", mutate: func(p *corev1.Pod) {
			p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("-1Mi")}
		}, want: []want{invalid("spec.containers[0].resources.limits[memory]")}},
		{name: "unknown resource", mutate: func(p *corev1.Pod) {
			p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{"gpus": resource.MustParse("1")}
		}, want: []want{invalid("spec.containers[0].resources.limits[gpus]")}},
		{name: "extended resource without limit", mutate: func(p *corev1.Pod) {
			p.Spec.Containers[0].Resources.Requests = corev1.ResourceList{"example.com/gpu": resource.MustParse("1")}
		}, want: []want{required("spec.containers[0].resources.limits[example.com/gpu]")}},
		{name: "probe with two handlers", mutate: func(p *corev1.Pod) {
			p.Spec.Containers[0].LivenessProbe = probe(func(pr *corev1.Probe) {
				pr.TCPSocket = &corev1.TCPSocketAction{Port: intstr.FromInt32(8080)}
			})
		}, want: []want{forbidden("spec.containers[0].livenessProbe.tcpSocket")}},
		{name: "probe without handler", mutate: func(p *corev1.Pod) {
			p.Spec.Containers[0].ReadinessProbe = probe(func(pr *corev1.Probe) { pr.HTTPGet = nil })
		}, want: []want{required("spec.containers[0].readinessProbe")}},
		{name: "liveness success threshold", mutate: func(p *corev1.Pod) {
			p.Spec.Containers[0].LivenessProbe = probe(func(pr *corev1.Probe) { pr.SuccessThreshold = 2 })
		}, want: []want{invalid("spec.containers[0].livenessProbe.successThreshold")}},
		{name: "readiness success threshold may be above 1", mutate: func(p *corev1.Pod) {
			p.Spec.Containers[0].ReadinessProbe = probe(func(pr *corev1.Probe) { pr.SuccessThreshold = 2 })
		}},
		{name: "probe port by name", mutate: func(p *corev1.Pod) {
			p.Spec.Containers[0].ReadinessProbe = probe(func(pr *corev1.Probe) { pr.HTTPGet.Port = intstr.FromString("http") })
		}},
		{name: "probe bad port and negative period", mutate: func(p *corev1.Pod) {
			p.Spec.Containers[0].ReadinessProbe = probe(func(pr *corev1.Probe) {
				pr.HTTPGet.Port = intstr.FromInt32(0)
				pr.PeriodSeconds = -1
			})
		}, want: []want{invalid("spec.containers[0].readinessProbe.httpGet.port"), invalid("spec.containers[0].readinessProbe.periodSeconds")}},
		{name: "probe on init container", mutate: func(p *corev1.Pod) {
			c := initContainer("setup")
			c.ReadinessProbe = probe(nil)
			p.Spec.InitContainers = []corev1.Container{c}
		}, want: []want{forbidden("spec.initContainers[0].readinessProbe")}},
		{name: "probe on sidecar init container", mutate: func(p *corev1.Pod) {
			c := initContainer("setup")
			always := corev1.ContainerRestartPolicyAlways
			c.RestartPolicy = &always
			c.ReadinessProbe = probe(nil)
			p.Spec.InitContainers = []corev1.Container{c}
		}},
		{name: "restart policy on app container", mutate: func(p *corev1.Pod) {
			always := corev1.ContainerRestartPolicyAlways
			p.Spec.Containers[0].RestartPolicy = &always
		}, want: []want{forbidden("spec.containers[0].restartPolicy")}},
		{name: "bad restart policy", mutate: func(p *corev1.Pod) { p.Spec.RestartPolicy = "Sometimes" }, want: []want{notSupported("spec.restartPolicy")}},
		{name: "bad dns policy", mutate: func(p *corev1.Pod) { p.Spec.DNSPolicy = "Google" }, want: []want{notSupported("spec.dnsPolicy")}},
		{name: "dns none without config", mutate: func(p *corev1.Pod) { p.Spec.DNSPolicy = corev1.DNSNone }, want: []want{required("spec.dnsConfig")}},
		{name: "duplicate volume", mutate: func(p *corev1.Pod) {
			p.Spec.Volumes = []corev1.Volume{emptyDir("data"), emptyDir("data")}
		}, want: []want{duplicate("spec.volumes[1].name")}},
		{name: "bad volume name", mutate: func(p *corev1.Pod) { p.Spec.Volumes = []corev1.Volume{emptyDir("Data")} }, want: []want{invalid("spec.volumes[0].name")}},
		{name: "volume with two sources", mutate: func(p *corev1.Pod) {
			v := emptyDir("data")
			v.ConfigMap = &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}}
			p.Spec.Volumes = []corev1.Volume{v}
		}, want: []want{forbidden("spec.volumes[0].configMap")}},
		{name: "volume without source", mutate: func(p *corev1.Pod) { p.Spec.Volumes = []corev1.Volume{{Name: "data"}} }, want: []want{required("spec.volumes[0]")}},
		{name: "configMap volume without name", mutate: func(p *corev1.Pod) {
			p.Spec.Volumes = []corev1.Volume{{Name: "cfg", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{}}}}
		}, want: []want{required("spec.volumes[0].configMap.name")}},
		{name: "secret volume bad mode and escaping path", mutate: func(p *corev1.Pod) {
			mode := int32(01000)
			p.Spec.Volumes = []corev1.Volume{{Name: "s", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
				SecretName: "creds", DefaultMode: &mode, Items: []corev1.KeyToPath{{Key: "k", Path: "../etc/passwd"}},
			}}}}
		}, want: []want{invalid("spec.volumes[0].secret.defaultMode"), invalid("spec.volumes[0].secret.items[0].path")}},
		{name: "hostPath without path", mutate: func(p *corev1.Pod) {
			p.Spec.Volumes = []corev1.Volume{{Name: "h", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{}}}}
		}, want: []want{required("spec.volumes[0].hostPath.path")}},
		{name: "mount of a missing volume", mutate: func(p *corev1.Pod) {
			p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}
		}, want: []want{notFound("spec.containers[0].volumeMounts[0].name")}},
		{name: "mounts", mutate: func(p *corev1.Pod) {
			p.Spec.Volumes = []corev1.Volume{emptyDir("data")}
			p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{
				{Name: "data", MountPath: "/data"},
				{Name: "data", MountPath: "/data", SubPath: "../x"},
				{Name: "data"},
			}
		}, want: []want{invalid("spec.containers[0].volumeMounts[1].mountPath"), invalid("spec.containers[0].volumeMounts[1].subPath"), required("spec.containers[0].volumeMounts[2].mountPath")}},
		{name: "env", mutate: func(p *corev1.Pod) {
			p.Spec.Containers[0].Env = []corev1.EnvVar{
				{Name: "", Value: "x"},
				{Name: "A=B"},
				{Name: "OK", Value: "v", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.name"}}},
				{Name: "NODE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "spec.containers"}}},
				{Name: "EMPTY", ValueFrom: &corev1.EnvVarSource{}},
				{Name: "KEY", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "s"}}}},
				{Name: "LABEL", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.labels['app']"}}},
			}
		}, want: []want{
			required("spec.containers[0].env[0].name"),
			invalid("spec.containers[0].env[1].name"),
			invalid("spec.containers[0].env[2].valueFrom"),
			notSupported("spec.containers[0].env[3].valueFrom.fieldRef.fieldPath"),
			invalid("spec.containers[0].env[4].valueFrom"),
			required("spec.containers[0].env[5].valueFrom.secretKeyRef.key"),
		}},
		{name: "toleration seconds need NoExecute", mutate: func(p *corev1.Pod) {
			secs := int64(10)
			p.Spec.Tolerations = append(p.Spec.Tolerations, corev1.Toleration{Key: "k", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule, TolerationSeconds: &secs})
		}, want: []want{invalid("spec.tolerations[2].effect")}},
		{name: "toleration exists with value", mutate: func(p *corev1.Pod) {
			p.Spec.Tolerations = append(p.Spec.Tolerations, corev1.Toleration{Key: "k", Operator: corev1.TolerationOpExists, Value: "v"})
		}, want: []want{invalid("spec.tolerations[2].value")}},
		{name: "toleration bad operator and effect", mutate: func(p *corev1.Pod) {
			p.Spec.Tolerations = append(p.Spec.Tolerations, corev1.Toleration{Key: "k", Operator: "Like", Effect: "Never"})
		}, want: []want{notSupported("spec.tolerations[2].operator"), notSupported("spec.tolerations[2].effect")}},
		{name: "node selector", mutate: func(p *corev1.Pod) { p.Spec.NodeSelector = map[string]string{"kubernetes.io/arch": "arm 64"} }, want: []want{invalid("spec.nodeSelector")}},
		{name: "node affinity", mutate: func(p *corev1.Pod) {
			p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
				NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{
					{Key: "zone", Operator: corev1.NodeSelectorOpIn},
					{Key: "zone", Operator: corev1.NodeSelectorOpExists, Values: []string{"a"}},
					{Key: "zone", Operator: "Near"},
				}}},
			}}}
		}, want: []want{
			required("spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].values"),
			forbidden("spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[1].values"),
			invalid("spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[2].operator"),
		}},
		{name: "topology spread", mutate: func(p *corev1.Pod) {
			p.Spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{MaxSkew: 0, WhenUnsatisfiable: "Maybe"}}
		}, want: []want{invalid("spec.topologySpreadConstraints[0].maxSkew"), required("spec.topologySpreadConstraints[0].topologyKey"), notSupported("spec.topologySpreadConstraints[0].whenUnsatisfiable")}},
		{name: "active deadline", mutate: func(p *corev1.Pod) { d := int64(0); p.Spec.ActiveDeadlineSeconds = &d }, want: []want{invalid("spec.activeDeadlineSeconds")}},
		{name: "bad node name", mutate: func(p *corev1.Pod) { p.Spec.NodeName = "Shop_1" }, want: []want{invalid("spec.nodeName")}},
		{name: "ephemeral containers", mutate: func(p *corev1.Pod) {
			p.Spec.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{
				Name: "debug", Image: image, ImagePullPolicy: corev1.PullIfNotPresent, TerminationMessagePolicy: corev1.TerminationMessageReadFile,
			}}}
		}, want: []want{forbidden("spec.ephemeralContainers")}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := validPod()
			tc.mutate(p)
			expectErrors(t, ValidateCreate(p, tc.opts), tc.want...)
		})
	}
}

func initContainer(name string) corev1.Container {
	return corev1.Container{Name: name, Image: image, ImagePullPolicy: corev1.PullIfNotPresent, TerminationMessagePolicy: corev1.TerminationMessageReadFile}
}

func sidecar(name string) corev1.Container { return initContainer(name) }

func emptyDir(name string) corev1.Volume {
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}
}

// probe is a defaulted HTTP probe, changed by mutate.
func probe(mutate func(*corev1.Probe)) *corev1.Probe {
	p := &corev1.Probe{
		ProbeHandler:     corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(8080), Scheme: corev1.URISchemeHTTP}},
		TimeoutSeconds:   1,
		PeriodSeconds:    10,
		SuccessThreshold: 1,
		FailureThreshold: 3,
	}
	if mutate != nil {
		mutate(p)
	}
	return p
}

func TestPodErrorMessages(t *testing.T) {
	p := validPod()
	p.Spec.Containers[0].Resources = corev1.ResourceRequirements{
		Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m")},
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")},
	}
	p.Spec.Containers[0].Image = "registry.local/shop/app:1.4"
	errs := ValidateCreate(p, Options{})
	for _, want := range []string{
		`spec.containers[0].resources.requests[cpu]: Invalid value: "1": must be less than or equal to cpu limit of 500m`,
		`spec.containers[0].image: Invalid value: "registry.local/shop/app:1.4": pin the image by digest: registry.local/shop/app@sha256:<64 hex digits>`,
	} {
		if !strings.Contains(joinErrs(errs), want) {
			t.Errorf("errors do not contain %q:\n  %s", want, joinErrs(errs))
		}
	}
}

func TestValidatePodUpdate(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(p *corev1.Pod)
		old    func(p *corev1.Pod)
		opts   Options
		want   []want
	}{
		{name: "labels and annotations", mutate: func(p *corev1.Pod) {
			p.Labels["version"] = "2"
			p.Annotations = map[string]string{"note": "x"}
		}},
		{name: "new digest", mutate: func(p *corev1.Pod) { p.Spec.Containers[0].Image = image2 }},
		{name: "new tag refused", mutate: func(p *corev1.Pod) { p.Spec.Containers[0].Image = "registry.local/shop/app:2" }, want: []want{invalid("spec.containers[0].image")}},
		{name: "new tag allowed", opts: Options{AllowTagImages: true}, mutate: func(p *corev1.Pod) { p.Spec.Containers[0].Image = "registry.local/shop/app:2" }},
		{name: "unchanged tag image is not checked again",
			old:    func(p *corev1.Pod) { p.Spec.Containers[0].Image = "registry.local/shop/app:1" },
			mutate: func(p *corev1.Pod) { p.Labels["x"] = "y" }},
		{name: "port change", mutate: func(p *corev1.Pod) { p.Spec.Containers[0].Ports[0].ContainerPort = 9090 }, want: []want{forbidden("spec")}},
		{name: "node name change", mutate: func(p *corev1.Pod) { p.Spec.NodeName = "other" }, want: []want{forbidden("spec")}},
		{name: "container added", mutate: func(p *corev1.Pod) {
			p.Spec.Containers = append(p.Spec.Containers, sidecar("log"))
		}, want: []want{forbidden("spec.containers")}},
		{name: "toleration added", mutate: func(p *corev1.Pod) {
			p.Spec.Tolerations = append(p.Spec.Tolerations, corev1.Toleration{Key: "dedicated", Operator: corev1.TolerationOpExists})
		}},
		{name: "toleration seconds changed", mutate: func(p *corev1.Pod) {
			s := int64(30)
			p.Spec.Tolerations[0].TolerationSeconds = &s
		}},
		{name: "toleration removed", mutate: func(p *corev1.Pod) { p.Spec.Tolerations = p.Spec.Tolerations[1:] }, want: []want{forbidden("spec.tolerations")}},
		{name: "deadline lowered", old: func(p *corev1.Pod) { d := int64(100); p.Spec.ActiveDeadlineSeconds = &d },
			mutate: func(p *corev1.Pod) { d := int64(50); p.Spec.ActiveDeadlineSeconds = &d }},
		{name: "deadline raised", old: func(p *corev1.Pod) { d := int64(100); p.Spec.ActiveDeadlineSeconds = &d },
			mutate: func(p *corev1.Pod) { d := int64(200); p.Spec.ActiveDeadlineSeconds = &d }, want: []want{invalid("spec.activeDeadlineSeconds")}},
		{name: "deadline removed", old: func(p *corev1.Pod) { d := int64(100); p.Spec.ActiveDeadlineSeconds = &d },
			mutate: func(p *corev1.Pod) { p.Spec.ActiveDeadlineSeconds = nil }, want: []want{invalid("spec.activeDeadlineSeconds")}},
		{name: "name changed", mutate: func(p *corev1.Pod) { p.Name = "web2" }, want: []want{invalid("metadata.name")}},
		{name: "no resourceVersion", mutate: func(p *corev1.Pod) { p.ResourceVersion = "" }, want: []want{invalid("metadata.resourceVersion")}},
		{name: "invalid new value is still reported", mutate: func(p *corev1.Pod) { p.Spec.Containers[0].Image = "" },
			want: []want{required("spec.containers[0].image")}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			old := stored(validPod())
			if tc.old != nil {
				tc.old(old)
			}
			p := old.DeepCopy()
			tc.mutate(p)
			expectErrors(t, ValidateUpdate(p, old, tc.opts), tc.want...)
		})
	}
}

func TestPodUpdateMessageNamesTheChange(t *testing.T) {
	old := stored(validPod())
	p := old.DeepCopy()
	p.Spec.Containers[0].Ports[0].ContainerPort = 9090
	errs := ValidateUpdate(p, old, Options{})
	if len(errs) != 1 {
		t.Fatalf("want one error, got %s", joinErrs(errs))
	}
	msg := errs[0].Error()
	for _, want := range []string{"pod updates may not change fields other than `spec.containers[*].image`", "spec.containers[0].ports[0].containerPort: 8080 -> 9090"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q does not contain %q", msg, want)
		}
	}
}

func TestValidatePodStatusUpdate(t *testing.T) {
	cases := []struct {
		name   string
		old    func(p *corev1.Pod)
		mutate func(p *corev1.Pod)
		want   []want
	}{
		{name: "running", mutate: func(p *corev1.Pod) {
			p.Status.Phase = corev1.PodRunning
			p.Status.PodIP = "10.42.1.5"
			p.Status.PodIPs = []corev1.PodIP{{IP: "10.42.1.5"}}
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "app", Ready: true}}
		}},
		{name: "leaving a terminal phase", old: func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded },
			mutate: func(p *corev1.Pod) { p.Status.Phase = corev1.PodRunning }, want: []want{forbidden("status.phase")}},
		{name: "bad phase", mutate: func(p *corev1.Pod) { p.Status.Phase = "Sleeping" }, want: []want{notSupported("status.phase")}},
		{name: "bad IPs", mutate: func(p *corev1.Pod) {
			p.Status.PodIP = "10.42.1.500"
			p.Status.PodIPs = []corev1.PodIP{{IP: "10.42.1.5"}, {IP: "10.42.1.6"}}
		}, want: []want{invalid("status.podIP"), invalid("status.podIPs"), invalid("status.podIPs[0].ip")}},
		{name: "status of an unknown container", mutate: func(p *corev1.Pod) {
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "ghost"}}
		}, want: []want{notFound("status.containerStatuses[0].name")}},
		{name: "terminated container restarted under Never", old: func(p *corev1.Pod) {
			p.Spec.RestartPolicy = corev1.RestartPolicyNever
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "app", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1}}}}
		}, mutate: func(p *corev1.Pod) {
			p.Status.ContainerStatuses[0].State = corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}
		}, want: []want{forbidden("status.containerStatuses[0].state")}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			old := stored(validPod())
			if tc.old != nil {
				tc.old(old)
			}
			p := old.DeepCopy()
			tc.mutate(p)
			expectErrors(t, ValidateStatusUpdate(p, old), tc.want...)
		})
	}
}

func TestValidateUnknownKind(t *testing.T) {
	expectErrors(t, ValidateCreate(&corev1.PodTemplate{}, Options{}), internal("kind"))
	expectErrors(t, ValidateUpdate(&corev1.PodTemplate{}, &corev1.PodTemplate{}, Options{}), internal("kind"))
	expectErrors(t, ValidateUpdate(validPod(), &corev1.Service{}, Options{}), internal("kind"))
	if errs := ValidateCreate(&corev1.PodTemplate{}, Options{}); errs[0].Type != field.ErrorTypeInternal {
		t.Errorf("got %v", errs)
	}
}
