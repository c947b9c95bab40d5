package printers

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/duration"
	ptrs "k8s.io/utils/ptr"

	"flotilla.dev/flotilla/api/podutil"
	"flotilla.dev/flotilla/api/v1alpha1"
)

const (
	none    = "<none>"
	unknown = "<unknown>"
	unset   = "<unset>"
)

func col(name, typ, desc string) column { return column{Name: name, Type: typ, Description: desc} }

func wide(name, typ, desc string) column {
	return column{Name: name, Type: typ, Description: desc, Priority: 1}
}

// as adapts a typed cell function to the registry's signature.
func as[T runtime.Object](f func(T, time.Time) []any) func(runtime.Object, time.Time) ([]any, error) {
	return func(obj runtime.Object, now time.Time) ([]any, error) {
		t, ok := obj.(T)
		if !ok {
			var want T
			return nil, fmt.Errorf("got %T, want %T", obj, want)
		}
		return f(t, now), nil
	}
}

func init() {
	register(corev1.SchemeGroupVersion.WithKind("Pod"), []column{
		nameColumn(),
		col("Ready", "string", "The number of containers that are ready."),
		col("Status", "string", "The aggregate status of the containers in this pod."),
		col("Restarts", "string", "The number of times the containers in this pod have been restarted and when the last container restarted."),
		ageColumn(),
		wide("IP", "string", "The IP address assigned to the pod."),
		wide("Node", "string", "The device the pod is bound to."),
		wide("Nominated Node", "string", "The node the scheduler nominated for the pod, if any."),
		wide("Readiness Gates", "string", "How many of the pod's readiness gates are true."),
	}, as(podCells))

	register(corev1.SchemeGroupVersion.WithKind("Node"), []column{
		nameColumn(),
		col("Status", "string", "The status of the device."),
		col("Roles", "string", "The roles of the device."),
		ageColumn(),
		col("Version", "string", "The version of the agent on the device."),
		wide("Internal-IP", "string", "The device's internal IP address."),
		wide("External-IP", "string", "The device's external IP address."),
		wide("OS-Image", "string", "The operating system the device reports."),
		wide("Kernel-Version", "string", "The kernel version the device reports."),
		wide("Arch", "string", "The CPU architecture of the device."),
		wide("Container-Runtime", "string", "The container runtime of the device."),
	}, as(nodeCells))

	register(appsv1.SchemeGroupVersion.WithKind("Deployment"), []column{
		nameColumn(),
		col("Ready", "string", "Ready pods of desired pods."),
		col("Up-to-date", "integer", "Pods running the current template."),
		col("Available", "integer", "Pods available for at least minReadySeconds."),
		ageColumn(),
		wide("Containers", "string", "Names of each container in the template."),
		wide("Images", "string", "Images of each container in the template."),
		wide("Selector", "string", "The label selector of the pods."),
	}, as(deploymentCells))

	register(appsv1.SchemeGroupVersion.WithKind("ReplicaSet"), []column{
		nameColumn(),
		col("Desired", "integer", "Number of desired pods."),
		col("Current", "integer", "Number of pods that exist."),
		col("Ready", "integer", "Number of ready pods."),
		ageColumn(),
		wide("Containers", "string", "Names of each container in the template."),
		wide("Images", "string", "Images of each container in the template."),
		wide("Selector", "string", "The label selector of the pods."),
	}, as(replicaSetCells))

	register(appsv1.SchemeGroupVersion.WithKind("DaemonSet"), []column{
		nameColumn(),
		col("Desired", "integer", "Number of devices that should run the pod."),
		col("Current", "integer", "Number of devices running the pod."),
		col("Ready", "integer", "Number of devices whose pod is ready."),
		col("Up-to-date", "integer", "Number of devices running the current template."),
		col("Available", "integer", "Number of devices whose pod is available."),
		col("Node Selector", "string", "The devices the pods may run on."),
		ageColumn(),
		wide("Containers", "string", "Names of each container in the template."),
		wide("Images", "string", "Images of each container in the template."),
		wide("Selector", "string", "The label selector of the pods."),
	}, as(daemonSetCells))

	register(batchv1.SchemeGroupVersion.WithKind("Job"), []column{
		nameColumn(),
		col("Status", "string", "Complete, Failed, Suspended, Terminating or Running."),
		col("Completions", "string", "The number of pods that succeeded, of those wanted."),
		col("Duration", "string", "How long the job ran, or has been running."),
		ageColumn(),
		wide("Containers", "string", "Names of each container in the template."),
		wide("Images", "string", "Images of each container in the template."),
		wide("Selector", "string", "The label selector of the pods."),
	}, as(jobCells))

	register(batchv1.SchemeGroupVersion.WithKind("CronJob"), []column{
		nameColumn(),
		col("Schedule", "string", "The schedule in cron format."),
		col("Timezone", "string", "The time zone of the schedule."),
		col("Suspend", "boolean", "Whether the cron job is suspended."),
		col("Active", "integer", "The number of running jobs."),
		col("Last Schedule", "date", "When the last job was scheduled."),
		ageColumn(),
		wide("Containers", "string", "Names of each container in the job template."),
		wide("Images", "string", "Images of each container in the job template."),
		wide("Selector", "string", "The label selector of the job template's pods."),
	}, as(cronJobCells))

	register(appsv1.SchemeGroupVersion.WithKind("ControllerRevision"), []column{
		nameColumn(),
		col("Controller", "string", "The object this revision belongs to (kind/name)."),
		col("Revision", "integer", "The revision's number: the newest is the highest."),
		ageColumn(),
	}, as(controllerRevisionCells))

	register(corev1.SchemeGroupVersion.WithKind("Service"), []column{
		nameColumn(),
		col("Type", "string", "The type of the service."),
		col("Cluster-IP", "string", "The virtual IP of the service."),
		col("External-IP", "string", "External addresses of the service."),
		col("Port(s)", "string", "The ports of the service."),
		ageColumn(),
		wide("Selector", "string", "The label selector of the service's pods."),
	}, as(serviceCells))

	register(discoveryv1.SchemeGroupVersion.WithKind("EndpointSlice"), []column{
		nameColumn(),
		col("AddressType", "string", "The type of the addresses."),
		col("Ports", "string", "The ports of the endpoints."),
		col("Endpoints", "string", "The addresses of the endpoints."),
		ageColumn(),
	}, as(endpointSliceCells))

	register(corev1.SchemeGroupVersion.WithKind("ConfigMap"), []column{
		nameColumn(),
		col("Data", "integer", "Number of keys."),
		ageColumn(),
	}, as(func(cm *corev1.ConfigMap, now time.Time) []any {
		return []any{cm.Name, int64(len(cm.Data) + len(cm.BinaryData)), age(cm.CreationTimestamp, now)}
	}))

	register(corev1.SchemeGroupVersion.WithKind("Secret"), []column{
		nameColumn(),
		col("Type", "string", "The type of the secret."),
		col("Data", "integer", "Number of keys; values are never printed."),
		ageColumn(),
	}, as(func(s *corev1.Secret, now time.Time) []any {
		keys := len(s.Data)
		for k := range s.StringData {
			if _, dup := s.Data[k]; !dup {
				keys++
			}
		}
		return []any{s.Name, string(s.Type), int64(keys), age(s.CreationTimestamp, now)}
	}))

	register(corev1.SchemeGroupVersion.WithKind("Event"), []column{
		col("Last Seen", "string", "When the event was last seen."),
		col("Type", "string", "Normal or Warning."),
		col("Reason", "string", "Why the event happened, in one word."),
		col("Object", "string", "The object the event is about."),
		wide("Subobject", "string", "The part of the object the event is about."),
		wide("Source", "string", "The component that reported the event."),
		col("Message", "string", "What happened."),
		wide("First Seen", "string", "When the event was first seen."),
		wide("Count", "integer", "How often it happened."),
		wide("Name", "string", "The event's name."),
	}, as(eventCells))

	register(coordinationv1.SchemeGroupVersion.WithKind("Lease"), []column{
		nameColumn(),
		col("Holder", "string", "The holder of the lease."),
		ageColumn(),
	}, as(func(l *coordinationv1.Lease, now time.Time) []any {
		holder := ""
		if l.Spec.HolderIdentity != nil {
			holder = *l.Spec.HolderIdentity
		}
		return []any{l.Name, holder, age(l.CreationTimestamp, now)}
	}))

	register(schedulingv1.SchemeGroupVersion.WithKind("PriorityClass"), []column{
		nameColumn(),
		col("Value", "integer", "The priority pods of this class get."),
		col("Global-Default", "boolean", "Whether pods naming no class get this one."),
		ageColumn(),
		col("PreemptionPolicy", "string", "Whether pods of this class may preempt lower-priority pods."),
	}, as(func(pc *schedulingv1.PriorityClass, now time.Time) []any {
		policy := ""
		if pc.PreemptionPolicy != nil {
			policy = string(*pc.PreemptionPolicy)
		}
		return []any{pc.Name, int64(pc.Value), pc.GlobalDefault, age(pc.CreationTimestamp, now), policy}
	}))

	register(corev1.SchemeGroupVersion.WithKind("Namespace"), []column{
		nameColumn(),
		col("Status", "string", "The phase of the namespace."),
		ageColumn(),
	}, as(func(ns *corev1.Namespace, now time.Time) []any {
		return []any{ns.Name, string(ns.Status.Phase), age(ns.CreationTimestamp, now)}
	}))

	register(v1alpha1.SchemeGroupVersion.WithKind("GitSource"), []column{
		nameColumn(),
		col("URL", "string", "The repository followed."),
		col("Ref", "string", "The branch, tag or commit followed."),
		col("Commit", "string", "The last applied commit."),
		col("Ready", "string", "Whether the latest commit is applied."),
		col("Message", "string", "Why it is (not) ready."),
		ageColumn(),
	}, as(gitSourceCells))

	register(v1alpha1.SchemeGroupVersion.WithKind("RolloutPolicy"), []column{
		nameColumn(),
		col("Waves", "string", "The waves, in order."),
		col("On Failure", "string", "What a failed wave leads to: Pause or Rollback."),
		col("Paused", "boolean", "Whether spec.paused holds every rollout of the policy."),
		col("Rollouts", "string", "Each selected workload's phase and current wave."),
		col("Conditions", "string", "The policy's conditions that are True (Overlapping: it selects a workload another policy stages)."),
		ageColumn(),
		wide("Selector", "string", "The labels of the workloads rolled out in waves."),
		wide("Message", "string", "The message of the first condition that is True."),
	}, as(rolloutPolicyCells))
}

func podCells(pod *corev1.Pod, now time.Time) []any {
	s := SummarizePod(pod)
	restarts := strconv.Itoa(s.Restarts)
	if s.Restarts != 0 && !s.LastRestart.IsZero() {
		restarts = fmt.Sprintf("%d (%s ago)", s.Restarts, age(metav1.NewTime(s.LastRestart), now))
	}
	ip := orNone(pod.Status.PodIP)
	if len(pod.Status.PodIPs) > 0 {
		ip = orNone(pod.Status.PodIPs[0].IP)
	}
	gates := none
	if n := len(pod.Spec.ReadinessGates); n > 0 {
		ok := 0
		for _, g := range pod.Spec.ReadinessGates {
			if podutil.ConditionTrue(&pod.Status, g.ConditionType) {
				ok++
			}
		}
		gates = fmt.Sprintf("%d/%d", ok, n)
	}
	return []any{
		pod.Name, fmt.Sprintf("%d/%d", s.Ready, s.Total), s.Status, restarts, age(pod.CreationTimestamp, now),
		ip, orNone(pod.Spec.NodeName), orNone(pod.Status.NominatedNodeName), gates,
	}
}

// NodeStatus is the word kubectl shows in a node's STATUS column: Ready,
// NotReady or Unknown, with ",SchedulingDisabled" when cordoned.
func NodeStatus(n *corev1.Node) string {
	var words []string
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			if c.Status == corev1.ConditionTrue {
				words = append(words, "Ready")
			} else {
				words = append(words, "NotReady")
			}
			break
		}
	}
	if len(words) == 0 {
		words = append(words, "Unknown")
	}
	if n.Spec.Unschedulable {
		words = append(words, "SchedulingDisabled")
	}
	return strings.Join(words, ",")
}

// NodeRoles reads the roles kubectl shows from node-role.kubernetes.io/<role>
// and kubernetes.io/role labels.
func NodeRoles(n *corev1.Node) string {
	roles := map[string]bool{}
	for k, v := range n.Labels {
		switch {
		case strings.HasPrefix(k, "node-role.kubernetes.io/"):
			if r := strings.TrimPrefix(k, "node-role.kubernetes.io/"); r != "" {
				roles[r] = true
			}
		case k == "kubernetes.io/role" && v != "":
			roles[v] = true
		}
	}
	if len(roles) == 0 {
		return none
	}
	out := make([]string, 0, len(roles))
	for r := range roles {
		out = append(out, r)
	}
	sort.Strings(out)
	return strings.Join(out, ",")
}

func nodeCells(n *corev1.Node, now time.Time) []any {
	info := n.Status.NodeInfo
	return []any{
		n.Name, NodeStatus(n), NodeRoles(n), age(n.CreationTimestamp, now), info.KubeletVersion,
		nodeAddress(n, corev1.NodeInternalIP), nodeAddress(n, corev1.NodeExternalIP),
		orUnknown(info.OSImage), orUnknown(info.KernelVersion), orUnknown(info.Architecture), orUnknown(info.ContainerRuntimeVersion),
	}
}

func nodeAddress(n *corev1.Node, t corev1.NodeAddressType) string {
	for _, a := range n.Status.Addresses {
		if a.Type == t {
			return a.Address
		}
	}
	return none
}

func deploymentCells(d *appsv1.Deployment, now time.Time) []any {
	names, images := containers(d.Spec.Template.Spec)
	return []any{
		d.Name, fmt.Sprintf("%d/%d", d.Status.ReadyReplicas, replicas(d.Spec.Replicas)),
		int64(d.Status.UpdatedReplicas), int64(d.Status.AvailableReplicas), age(d.CreationTimestamp, now),
		names, images, selector(d.Spec.Selector),
	}
}

func replicaSetCells(rs *appsv1.ReplicaSet, now time.Time) []any {
	names, images := containers(rs.Spec.Template.Spec)
	return []any{
		rs.Name, int64(replicas(rs.Spec.Replicas)), int64(rs.Status.Replicas), int64(rs.Status.ReadyReplicas),
		age(rs.CreationTimestamp, now), names, images, selector(rs.Spec.Selector),
	}
}

func daemonSetCells(ds *appsv1.DaemonSet, now time.Time) []any {
	names, images := containers(ds.Spec.Template.Spec)
	st := ds.Status
	return []any{
		ds.Name, int64(st.DesiredNumberScheduled), int64(st.CurrentNumberScheduled), int64(st.NumberReady),
		int64(st.UpdatedNumberScheduled), int64(st.NumberAvailable),
		orNone(labels.FormatLabels(ds.Spec.Template.Spec.NodeSelector)), age(ds.CreationTimestamp, now),
		names, images, selector(ds.Spec.Selector),
	}
}

func cronJobCells(cj *batchv1.CronJob, now time.Time) []any {
	names, images := containers(cj.Spec.JobTemplate.Spec.Template.Spec)
	tz, suspend, last := none, "<unset>", none
	if cj.Spec.TimeZone != nil {
		tz = *cj.Spec.TimeZone
	}
	if s := cj.Spec.Suspend; s != nil {
		suspend = "False"
		if *s {
			suspend = "True"
		}
	}
	if t := cj.Status.LastScheduleTime; t != nil {
		last = age(*t, now)
	}
	// Usually none: each Job gets its selector when it is created.
	sel := none
	if s := cj.Spec.JobTemplate.Spec.Selector; s != nil {
		sel = selector(s)
	}
	return []any{cj.Name, cj.Spec.Schedule, tz, suspend, int64(len(cj.Status.Active)), last, age(cj.CreationTimestamp, now),
		names, images, sel}
}

func jobCells(j *batchv1.Job, now time.Time) []any {
	names, images := containers(j.Spec.Template.Spec)
	status := "Running"
	for _, c := range j.Status.Conditions {
		if c.Status != corev1.ConditionTrue {
			continue
		}
		switch c.Type {
		case batchv1.JobComplete, batchv1.JobFailed:
			status = string(c.Type)
		case batchv1.JobSuspended:
			if status == "Running" {
				status = "Suspended"
			}
		}
	}
	if j.DeletionTimestamp != nil {
		status = "Terminating"
	}
	completions := fmt.Sprintf("%d/1 of %d", j.Status.Succeeded, ptrs.Deref(j.Spec.Parallelism, 1))
	if j.Spec.Completions != nil {
		completions = fmt.Sprintf("%d/%d", j.Status.Succeeded, *j.Spec.Completions)
	}
	dur := ""
	if st := j.Status.StartTime; st != nil {
		end := now
		if ct := j.Status.CompletionTime; ct != nil {
			end = ct.Time
		}
		dur = duration.HumanDuration(end.Sub(st.Time))
	}
	return []any{j.Name, status, completions, dur, age(j.CreationTimestamp, now), names, images, selector(j.Spec.Selector)}
}

func controllerRevisionCells(r *appsv1.ControllerRevision, now time.Time) []any {
	owner := none
	if ref := metav1.GetControllerOfNoCopy(r); ref != nil {
		owner = strings.ToLower(ref.Kind) + "." + groupOf(ref.APIVersion) + "/" + ref.Name
	}
	return []any{r.Name, owner, r.Revision, age(r.CreationTimestamp, now)}
}

// groupOf is the group of an apiVersion ("apps/v1" → "apps", "v1" → "").
func groupOf(apiVersion string) string {
	g, _, ok := strings.Cut(apiVersion, "/")
	if !ok {
		return ""
	}
	return g
}

func serviceCells(svc *corev1.Service, now time.Time) []any {
	typ := svc.Spec.Type
	if typ == "" {
		typ = corev1.ServiceTypeClusterIP
	}
	clusterIP := svc.Spec.ClusterIP
	if len(svc.Spec.ClusterIPs) > 0 {
		clusterIP = strings.Join(svc.Spec.ClusterIPs, ",")
	}
	return []any{
		svc.Name, string(typ), orNone(clusterIP), externalIP(svc, typ), servicePorts(svc.Spec.Ports),
		age(svc.CreationTimestamp, now), orNone(labels.FormatLabels(svc.Spec.Selector)),
	}
}

func externalIP(svc *corev1.Service, typ corev1.ServiceType) string {
	switch typ {
	case corev1.ServiceTypeClusterIP, corev1.ServiceTypeNodePort:
		if len(svc.Spec.ExternalIPs) > 0 {
			return strings.Join(svc.Spec.ExternalIPs, ",")
		}
		return none
	case corev1.ServiceTypeLoadBalancer:
		var ips []string
		for _, in := range svc.Status.LoadBalancer.Ingress {
			if in.IP != "" {
				ips = append(ips, in.IP)
			} else if in.Hostname != "" {
				ips = append(ips, in.Hostname)
			}
		}
		ips = append(ips, svc.Spec.ExternalIPs...)
		if len(ips) == 0 {
			return "<pending>"
		}
		return strings.Join(ips, ",")
	case corev1.ServiceTypeExternalName:
		return svc.Spec.ExternalName
	}
	return unknown
}

func servicePorts(ports []corev1.ServicePort) string {
	if len(ports) == 0 {
		return none
	}
	out := make([]string, 0, len(ports))
	for _, p := range ports {
		proto := p.Protocol
		if proto == "" {
			proto = corev1.ProtocolTCP
		}
		if p.NodePort > 0 {
			out = append(out, fmt.Sprintf("%d:%d/%s", p.Port, p.NodePort, proto))
		} else {
			out = append(out, fmt.Sprintf("%d/%s", p.Port, proto))
		}
	}
	return strings.Join(out, ",")
}

// endpointSliceCells lists at most three ports and addresses, then how
// many more there are, as kubectl does.
func endpointSliceCells(es *discoveryv1.EndpointSlice, now time.Time) []any {
	var ports, addrs []string
	for _, p := range es.Ports {
		switch {
		case p.Port != nil:
			ports = append(ports, strconv.Itoa(int(*p.Port)))
		case p.Name != nil && *p.Name != "":
			ports = append(ports, *p.Name)
		default:
			ports = append(ports, "*")
		}
	}
	for _, e := range es.Endpoints {
		addrs = append(addrs, e.Addresses...)
	}
	return []any{es.Name, string(es.AddressType), firstThree(ports), firstThree(addrs), age(es.CreationTimestamp, now)}
}

func firstThree(list []string) string {
	const max = 3
	switch {
	case len(list) == 0:
		return unset
	case len(list) > max:
		return fmt.Sprintf("%s + %d more...", strings.Join(list[:max], ","), len(list)-max)
	}
	return strings.Join(list, ",")
}

func eventCells(e *corev1.Event, now time.Time) []any {
	first := age(e.FirstTimestamp, now)
	if e.FirstTimestamp.IsZero() {
		first = microAge(e.EventTime, now)
	}
	last := age(e.LastTimestamp, now)
	if e.LastTimestamp.IsZero() {
		last = first
	}
	count := e.Count
	if e.Series != nil {
		last = microAge(e.Series.LastObservedTime, now)
		count = e.Series.Count
	} else if count == 0 {
		count = 1
	}
	target := strings.ToLower(e.InvolvedObject.Kind)
	if e.InvolvedObject.Name != "" {
		target += "/" + e.InvolvedObject.Name
	}
	return []any{
		last, e.Type, e.Reason, target, e.InvolvedObject.FieldPath, eventSource(e),
		strings.TrimSpace(e.Message), first, int64(count), e.Name,
	}
}

func eventSource(e *corev1.Event) string {
	comp, host := e.Source.Component, e.Source.Host
	if comp == "" {
		comp, host = e.ReportingController, e.ReportingInstance
	}
	if host == "" {
		return comp
	}
	return comp + ", " + host
}

func gitSourceCells(g *v1alpha1.GitSource, now time.Time) []any {
	ready, msg := string(metav1.ConditionUnknown), g.Status.Message
	for _, c := range g.Status.Conditions {
		if c.Type == v1alpha1.ConditionReady {
			ready = string(c.Status)
			if c.Message != "" {
				msg = c.Message
			}
		}
	}
	return []any{
		g.Name, g.Spec.URL, GitRef(g.Spec.Ref), ShortCommit(g.Status.LastAppliedCommit), ready,
		oneLine(msg), age(g.CreationTimestamp, now),
	}
}

func rolloutPolicyCells(rp *v1alpha1.RolloutPolicy, now time.Time) []any {
	waves := make([]string, len(rp.Spec.Waves))
	for i, w := range rp.Spec.Waves {
		waves[i] = w.Name
	}
	sel := none
	if rp.Spec.Selector != nil {
		if s, err := metav1.LabelSelectorAsSelector(rp.Spec.Selector); err == nil && !s.Empty() {
			sel = s.String()
		}
	}
	var conds []string
	msg := ""
	for _, c := range rp.Status.Conditions {
		if c.Status == metav1.ConditionTrue {
			conds = append(conds, c.Type)
			if msg == "" {
				msg = c.Message
			}
		}
	}
	return []any{
		rp.Name, orNone(strings.Join(waves, ",")), string(rp.Spec.OnFailure), rp.Spec.Paused,
		RolloutSummary(rp.Status.Workloads), orNone(strings.Join(conds, ",")), age(rp.CreationTimestamp, now), sel, orNone(oneLine(msg)),
	}
}

// RolloutSummary says where each workload's rollout stands in a few words:
// "ds/kiosk Progressing@ten-percent, deploy/menu Complete".
func RolloutSummary(ws []v1alpha1.WorkloadRollout) string {
	if len(ws) == 0 {
		return none
	}
	parts := make([]string, len(ws))
	for i, w := range ws {
		short := map[string]string{"DaemonSet": "ds", "Deployment": "deploy"}[w.Kind]
		if short == "" {
			short = strings.ToLower(w.Kind)
		}
		parts[i] = short + "/" + w.Name + " " + string(w.Phase)
		if w.CurrentWave != "" && w.Phase != v1alpha1.RolloutComplete {
			parts[i] += "@" + w.CurrentWave
		}
	}
	return strings.Join(parts, ", ")
}

// GitRef names what a GitSource follows: a commit, "tag:<tag>" or a branch
// (the first one set, in the order the hub honours them).
func GitRef(r v1alpha1.GitRef) string {
	switch {
	case r.Commit != "":
		return "commit:" + ShortCommit(r.Commit)
	case r.Tag != "":
		return "tag:" + r.Tag
	case r.Branch != "":
		return r.Branch
	}
	return "HEAD"
}

// ShortCommit abbreviates a commit hash as git does by default.
func ShortCommit(c string) string {
	if c == "" {
		return none
	}
	if len(c) > 7 {
		return c[:7]
	}
	return c
}

func oneLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i] + " …"
	}
	return s
}

func containers(spec corev1.PodSpec) (names, images string) {
	var n, i []string
	for _, c := range spec.Containers {
		n = append(n, c.Name)
		i = append(i, c.Image)
	}
	return strings.Join(n, ","), strings.Join(i, ",")
}

func selector(s *metav1.LabelSelector) string {
	sel, err := metav1.LabelSelectorAsSelector(s)
	if err != nil {
		return "<invalid>"
	}
	if sel.Empty() {
		return none
	}
	return sel.String()
}

func replicas(r *int32) int32 {
	if r == nil {
		return 1
	}
	return *r
}

func orNone(s string) string {
	if s == "" {
		return none
	}
	return s
}

func orUnknown(s string) string {
	if s == "" {
		return unknown
	}
	return s
}
