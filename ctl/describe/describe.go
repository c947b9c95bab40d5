package describe

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
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

	"flotilla.dev/flotilla/api/printers"
	"flotilla.dev/flotilla/api/v1alpha1"
	"flotilla.dev/flotilla/ctl/diagnose"
	"flotilla.dev/flotilla/ctl/term"
)

// Describe writes obj as `flotctl describe` shows it. facts carries the
// events and the related objects the Diagnosis reads.
func Describe(obj runtime.Object, facts *diagnose.Facts, style term.Style) (string, error) {
	var buf bytes.Buffer
	w := &writer{tw: tabwriter.NewWriter(&buf, 0, 8, 2, ' ', 0), now: facts.Now}
	if w.now.IsZero() {
		w.now = time.Now()
	}
	var kind string
	var m *metav1.ObjectMeta
	var finding *diagnose.Finding
	diag := func(f diagnose.Finding) { finding = &f }
	switch o := obj.(type) {
	case *corev1.Pod:
		kind, m = "Pod", &o.ObjectMeta
		w.meta(m)
		describePod(w, o)
		diag(diagnose.Pod(o, facts))
	case *corev1.Node:
		kind, m = "Node", &o.ObjectMeta
		w.meta(m)
		describeNode(w, o, facts)
		diag(diagnose.Node(o, facts))
	case *appsv1.Deployment:
		kind, m = "Deployment", &o.ObjectMeta
		w.meta(m)
		describeDeployment(w, o)
		diag(diagnose.Deployment(o, facts))
	case *appsv1.ReplicaSet:
		kind, m = "ReplicaSet", &o.ObjectMeta
		w.meta(m)
		w.line(0, "Selector:\t%s", selector(o.Spec.Selector))
		w.line(0, "Replicas:\t%d current / %d desired", o.Status.Replicas, ptrOr(o.Spec.Replicas, 1))
		w.line(0, "Pods Status:\t%d Ready / %d Available", o.Status.ReadyReplicas, o.Status.AvailableReplicas)
		describeTemplate(w, &o.Spec.Template)
	case *appsv1.DaemonSet:
		kind, m = "DaemonSet", &o.ObjectMeta
		w.meta(m)
		describeDaemonSet(w, o)
		diag(diagnose.DaemonSet(o, facts))
	case *batchv1.Job:
		kind, m = "Job", &o.ObjectMeta
		w.meta(m)
		w.line(0, "Selector:\t%s", selector(o.Spec.Selector))
		w.line(0, "Parallelism:\t%d", ptrOr(o.Spec.Parallelism, 1))
		if o.Spec.Completions != nil {
			w.line(0, "Completions:\t%d", *o.Spec.Completions)
		} else {
			w.line(0, "Completions:\t<unset>")
		}
		if m := o.Spec.CompletionMode; m != nil {
			w.line(0, "Completion Mode:\t%s", *m)
		}
		w.line(0, "Backoff Limit:\t%d", ptrOr(o.Spec.BackoffLimit, 6))
		if o.Spec.BackoffLimitPerIndex != nil {
			w.line(0, "Backoff Limit Per Index:\t%d", *o.Spec.BackoffLimitPerIndex)
		}
		if o.Status.StartTime != nil {
			w.line(0, "Start Time:\t%s", o.Status.StartTime.UTC().Format(time.RFC1123Z))
		}
		if o.Status.CompletionTime != nil {
			w.line(0, "Completed At:\t%s", o.Status.CompletionTime.UTC().Format(time.RFC1123Z))
		}
		w.line(0, "Pods Statuses:\t%d Active / %d Succeeded / %d Failed", o.Status.Active, o.Status.Succeeded, o.Status.Failed)
		if o.Spec.CompletionMode != nil && *o.Spec.CompletionMode == batchv1.IndexedCompletion {
			w.line(0, "Completed Indexes:\t%s", orNone(o.Status.CompletedIndexes))
			if o.Status.FailedIndexes != nil {
				w.line(0, "Failed Indexes:\t%s", orNone(*o.Status.FailedIndexes))
			}
		}
		for _, c := range o.Status.Conditions {
			if c.Status == corev1.ConditionTrue {
				w.line(0, "Condition:\t%s (%s) %s", c.Type, c.Reason, c.Message)
			}
		}
		describeTemplate(w, &o.Spec.Template)
	case *batchv1.CronJob:
		kind, m = "CronJob", &o.ObjectMeta
		w.meta(m)
		w.line(0, "Schedule:\t%s", o.Spec.Schedule)
		if o.Spec.TimeZone != nil {
			w.line(0, "Time Zone:\t%s", *o.Spec.TimeZone)
		}
		w.line(0, "Concurrency Policy:\t%s", o.Spec.ConcurrencyPolicy)
		w.line(0, "Suspend:\t%t", ptrOr(o.Spec.Suspend, false))
		w.line(0, "Successful Job History Limit:\t%d", ptrOr(o.Spec.SuccessfulJobsHistoryLimit, 3))
		w.line(0, "Failed Job History Limit:\t%d", ptrOr(o.Spec.FailedJobsHistoryLimit, 1))
		if d := o.Spec.StartingDeadlineSeconds; d != nil {
			w.line(0, "Starting Deadline Seconds:\t%ds", *d)
		} else {
			w.line(0, "Starting Deadline Seconds:\t<unset>")
		}
		describeTemplate(w, &o.Spec.JobTemplate.Spec.Template)
		last := "<unset>"
		if t := o.Status.LastScheduleTime; t != nil {
			last = t.UTC().Format(time.RFC1123Z)
		}
		w.line(0, "Last Schedule Time:\t%s", last)
		if t := o.Status.LastSuccessfulTime; t != nil {
			w.line(0, "Last Successful Time:\t%s", t.UTC().Format(time.RFC1123Z))
		}
		var active []string
		for _, r := range o.Status.Active {
			active = append(active, r.Name)
		}
		w.line(0, "Active Jobs:\t%s", orNone(strings.Join(active, ", ")))
	case *appsv1.ControllerRevision:
		kind, m = "ControllerRevision", &o.ObjectMeta
		w.meta(m)
		owner := "<none>"
		if ref := metav1.GetControllerOfNoCopy(o); ref != nil {
			owner = ref.Kind + "/" + ref.Name
		}
		w.line(0, "Controlled By:\t%s", owner)
		w.line(0, "Revision:\t%d", o.Revision)
		// The template the revision records, when it is a workload's.
		var data struct {
			Spec struct {
				Template *corev1.PodTemplateSpec `json:"template"`
			} `json:"spec"`
		}
		if json.Unmarshal(o.Data.Raw, &data) == nil && data.Spec.Template != nil {
			describeTemplate(w, data.Spec.Template)
		}
	case *corev1.Service:
		kind, m = "Service", &o.ObjectMeta
		w.meta(m)
		describeService(w, o, facts)
		diag(diagnose.Service(o, facts))
	case *discoveryv1.EndpointSlice:
		kind, m = "EndpointSlice", &o.ObjectMeta
		w.meta(m)
		describeEndpointSlice(w, o)
	case *corev1.ConfigMap:
		kind, m = "ConfigMap", &o.ObjectMeta
		w.meta(m)
		w.line(0, "")
		w.line(0, "Data")
		w.line(0, "====")
		for _, k := range sortedKeys(o.Data) {
			w.line(0, "%s:", k)
			w.line(0, "----")
			w.line(0, "%s", o.Data[k])
			w.line(0, "")
		}
		for _, k := range sortedKeys(o.BinaryData) {
			w.line(0, "%s:\t%d bytes (binary)", k, len(o.BinaryData[k]))
		}
	case *corev1.Secret:
		kind, m = "Secret", &o.ObjectMeta
		w.meta(m)
		w.line(0, "Type:\t%s", o.Type)
		w.line(0, "")
		w.line(0, "Data")
		w.line(0, "====")
		// Sizes only: describe never shows a secret's values.
		for _, k := range sortedKeys(o.Data) {
			w.line(0, "%s:\t%d bytes", k, len(o.Data[k]))
		}
	case *corev1.Event:
		kind, m = "Event", &o.ObjectMeta
		w.meta(m)
		w.line(0, "Type:\t%s", o.Type)
		w.line(0, "Reason:\t%s", o.Reason)
		w.line(0, "Object:\t%s/%s", strings.ToLower(o.InvolvedObject.Kind), o.InvolvedObject.Name)
		w.line(0, "Source:\t%s", diagnose.EventSource(*o))
		w.line(0, "Last Seen:\t%s", w.ago(diagnose.LastSeen(*o)))
		w.line(0, "Count:\t%d", max(o.Count, 1))
		w.line(0, "Message:\t%s", o.Message)
	case *coordinationv1.Lease:
		kind, m = "Lease", &o.ObjectMeta
		w.meta(m)
		w.line(0, "Holder:\t%s", strOr(o.Spec.HolderIdentity))
		if o.Spec.LeaseDurationSeconds != nil {
			w.line(0, "Duration:\t%ds", *o.Spec.LeaseDurationSeconds)
		}
		if o.Spec.RenewTime != nil {
			w.line(0, "Renewed:\t%s (%s)", o.Spec.RenewTime.UTC().Format(time.RFC3339), w.ago(o.Spec.RenewTime.Time))
		}
	case *schedulingv1.PriorityClass:
		kind, m = "PriorityClass", &o.ObjectMeta
		w.meta(m)
		w.line(0, "Value:\t%d", o.Value)
		w.line(0, "GlobalDefault:\t%t", o.GlobalDefault)
		policy := "<unset>"
		if o.PreemptionPolicy != nil {
			policy = string(*o.PreemptionPolicy)
		}
		w.line(0, "PreemptionPolicy:\t%s", policy)
		w.line(0, "Description:\t%s", o.Description)
	case *corev1.Namespace:
		kind, m = "Namespace", &o.ObjectMeta
		w.meta(m)
		w.line(0, "Status:\t%s", o.Status.Phase)
	case *v1alpha1.GitSource:
		kind, m = "GitSource", &o.ObjectMeta
		w.meta(m)
		describeGitSource(w, o)
		diag(diagnose.GitSource(o, facts))
	case *v1alpha1.RolloutPolicy:
		kind, m = "RolloutPolicy", &o.ObjectMeta
		w.meta(m)
		describeRolloutPolicy(w, o)
	default:
		return "", fmt.Errorf("describe: flotctl cannot describe %T", obj)
	}
	w.events(facts.EventsFor(kind, m.Namespace, m.Name))
	if err := w.tw.Flush(); err != nil {
		return "", err
	}
	if finding != nil {
		writeDiagnosis(&buf, *finding, style)
	}
	return buf.String(), nil
}

// writer indents as kubectl describe does: two spaces a level, values
// aligned in tab-separated columns.
type writer struct {
	tw  *tabwriter.Writer
	now time.Time
}

func (w *writer) line(level int, format string, args ...any) {
	fmt.Fprintf(w.tw, strings.Repeat("  ", level)+format+"\n", args...)
}

func (w *writer) ago(t time.Time) string {
	if t.IsZero() {
		return "<unknown>"
	}
	return duration.HumanDuration(w.now.Sub(t)) + " ago"
}

func (w *writer) meta(m *metav1.ObjectMeta) {
	w.line(0, "Name:\t%s", m.Name)
	if m.Namespace != "" {
		w.line(0, "Namespace:\t%s", m.Namespace)
	}
	w.mapLines("Labels", m.Labels)
	w.mapLines("Annotations", hideNoisy(m.Annotations))
	if !m.CreationTimestamp.IsZero() {
		w.line(0, "Created:\t%s (%s)", m.CreationTimestamp.UTC().Format(time.RFC1123Z), w.ago(m.CreationTimestamp.Time))
	}
	for _, o := range m.OwnerReferences {
		if o.Controller != nil && *o.Controller {
			w.line(0, "Controlled By:\t%s/%s", o.Kind, o.Name)
		}
	}
	if m.DeletionTimestamp != nil {
		w.line(0, "Deleting Since:\t%s (%s)", m.DeletionTimestamp.UTC().Format(time.RFC3339), w.ago(m.DeletionTimestamp.Time))
	}
}

// hideNoisy drops the last-applied copy of the object, which repeats it.
func hideNoisy(a map[string]string) map[string]string {
	if _, ok := a[corev1.LastAppliedConfigAnnotation]; !ok {
		return a
	}
	out := map[string]string{}
	for k, v := range a {
		if k != corev1.LastAppliedConfigAnnotation {
			out[k] = v
		}
	}
	return out
}

func (w *writer) mapLines(title string, m map[string]string) {
	if len(m) == 0 {
		w.line(0, "%s:\t<none>", title)
		return
	}
	for i, k := range sortedKeys(m) {
		if i == 0 {
			w.line(0, "%s:\t%s=%s", title, k, m[k])
		} else {
			w.line(0, "\t%s=%s", k, m[k])
		}
	}
}

func (w *writer) events(evs []corev1.Event) {
	if len(evs) == 0 {
		w.line(0, "Events:\t<none>")
		return
	}
	w.line(0, "Events:")
	w.line(1, "Type\tReason\tAge\tFrom\tMessage")
	w.line(1, "----\t------\t----\t----\t-------")
	// Oldest first, as kubectl lists them.
	for i := len(evs) - 1; i >= 0; i-- {
		e := evs[i]
		age := duration.HumanDuration(w.now.Sub(diagnose.LastSeen(e)))
		if e.Count > 1 {
			age = fmt.Sprintf("%s (x%d)", age, e.Count)
		}
		w.line(1, "%s\t%s\t%s\t%s\t%s", e.Type, e.Reason, age, diagnose.EventSource(e), strings.TrimSpace(e.Message))
	}
}

func writeDiagnosis(out io.Writer, f diagnose.Finding, style term.Style) {
	fmt.Fprintln(out, style.Bold("Diagnosis:"))
	word := strings.ToUpper(f.Severity.String())
	switch f.Severity {
	case diagnose.OK:
		word = style.Green("OK")
	case diagnose.Info:
		word = style.Dim("INFO")
	case diagnose.Warning:
		word = style.Yellow(word)
	default:
		word = style.Red(word)
	}
	fmt.Fprintf(out, "  %s  %s\n", word, f.Summary)
	if !f.Healthy() {
		fmt.Fprintf(out, "  Stuck at: %s\n", f.Stage)
		fmt.Fprintf(out, "  Owner:    %s\n", f.Owner)
	}
	for _, d := range f.Details {
		fmt.Fprintf(out, "  - %s\n", d)
	}
}

func describePod(w *writer, p *corev1.Pod) {
	node := p.Spec.NodeName
	if node == "" {
		node = "<none>"
	} else if p.Status.HostIP != "" {
		node += "/" + p.Status.HostIP
	}
	w.line(0, "Node:\t%s", node)
	if p.Status.StartTime != nil {
		w.line(0, "Start Time:\t%s", p.Status.StartTime.UTC().Format(time.RFC1123Z))
	}
	w.line(0, "Status:\t%s", printers.PodStatus(p))
	if p.Status.Message != "" {
		w.line(0, "Message:\t%s", p.Status.Message)
	}
	w.line(0, "IP:\t%s", orNone(p.Status.PodIP))
	if len(p.Spec.InitContainers) > 0 {
		w.line(0, "Init Containers:")
		containers(w, p.Spec.InitContainers, p.Status.InitContainerStatuses)
	}
	w.line(0, "Containers:")
	containers(w, p.Spec.Containers, p.Status.ContainerStatuses)
	if len(p.Status.Conditions) > 0 {
		w.line(0, "Conditions:")
		w.line(1, "Type\tStatus\tReason")
		for _, c := range p.Status.Conditions {
			w.line(1, "%s\t%s\t%s", c.Type, c.Status, c.Reason)
		}
	}
	w.mapLines("Node-Selectors", p.Spec.NodeSelector)
	if len(p.Spec.Tolerations) > 0 {
		var ts []string
		for _, t := range p.Spec.Tolerations {
			s := t.Key
			if t.Value != "" {
				s += "=" + t.Value
			}
			if t.Effect != "" {
				s += ":" + string(t.Effect)
			}
			ts = append(ts, s)
		}
		w.line(0, "Tolerations:\t%s", strings.Join(ts, ", "))
	}
}

func containers(w *writer, specs []corev1.Container, statuses []corev1.ContainerStatus) {
	byName := map[string]corev1.ContainerStatus{}
	for _, s := range statuses {
		byName[s.Name] = s
	}
	for _, c := range specs {
		w.line(1, "%s:", c.Name)
		w.line(2, "Image:\t%s", c.Image)
		st, ok := byName[c.Name]
		if ok && st.ImageID != "" {
			w.line(2, "Image ID:\t%s", st.ImageID)
		}
		var ports []string
		for _, p := range c.Ports {
			ports = append(ports, fmt.Sprintf("%d/%s", p.ContainerPort, orDefault(string(p.Protocol), "TCP")))
		}
		if len(ports) > 0 {
			w.line(2, "Ports:\t%s", strings.Join(ports, ", "))
		}
		if ok {
			state(w, "State", st.State)
			if st.LastTerminationState != (corev1.ContainerState{}) {
				state(w, "Last State", st.LastTerminationState)
			}
			w.line(2, "Ready:\t%t", st.Ready)
			w.line(2, "Restart Count:\t%d", st.RestartCount)
		}
		if p := c.ReadinessProbe; p != nil {
			w.line(2, "Readiness:\t%s", probe(p))
		}
		if p := c.LivenessProbe; p != nil {
			w.line(2, "Liveness:\t%s", probe(p))
		}
		if l := c.Resources.Limits; len(l) > 0 {
			w.line(2, "Limits:\t%s", resources(l))
		}
		if r := c.Resources.Requests; len(r) > 0 {
			w.line(2, "Requests:\t%s", resources(r))
		}
	}
}

func state(w *writer, title string, s corev1.ContainerState) {
	switch {
	case s.Running != nil:
		w.line(2, "%s:\tRunning", title)
		w.line(3, "Started:\t%s", s.Running.StartedAt.UTC().Format(time.RFC1123Z))
	case s.Waiting != nil:
		w.line(2, "%s:\tWaiting", title)
		w.line(3, "Reason:\t%s", s.Waiting.Reason)
		if s.Waiting.Message != "" {
			w.line(3, "Message:\t%s", s.Waiting.Message)
		}
	case s.Terminated != nil:
		t := s.Terminated
		w.line(2, "%s:\tTerminated", title)
		w.line(3, "Reason:\t%s", t.Reason)
		if t.Message != "" {
			w.line(3, "Message:\t%s", strings.TrimSpace(t.Message))
		}
		w.line(3, "Exit Code:\t%d", t.ExitCode)
		if t.Signal != 0 {
			w.line(3, "Signal:\t%d", t.Signal)
		}
		if !t.FinishedAt.IsZero() {
			w.line(3, "Finished:\t%s", t.FinishedAt.UTC().Format(time.RFC1123Z))
		}
	default:
		w.line(2, "%s:\tWaiting", title)
	}
}

func probe(p *corev1.Probe) string {
	var what string
	switch h := p.ProbeHandler; {
	case h.HTTPGet != nil:
		what = fmt.Sprintf("http-get %s:%s%s", strings.ToLower(orDefault(string(h.HTTPGet.Scheme), "http")), h.HTTPGet.Port.String(), h.HTTPGet.Path)
	case h.TCPSocket != nil:
		what = "tcp-socket :" + h.TCPSocket.Port.String()
	case h.Exec != nil:
		what = "exec " + strings.Join(h.Exec.Command, " ")
	case h.GRPC != nil:
		what = fmt.Sprintf("grpc :%d", h.GRPC.Port)
	default:
		what = "unknown"
	}
	return fmt.Sprintf("%s delay=%ds timeout=%ds period=%ds #success=%d #failure=%d", what,
		p.InitialDelaySeconds, max(p.TimeoutSeconds, 1), max(p.PeriodSeconds, 10), max(p.SuccessThreshold, 1), max(p.FailureThreshold, 3))
}

func resources(l corev1.ResourceList) string {
	var parts []string
	for _, k := range sortedKeys(l) {
		q := l[corev1.ResourceName(k)]
		parts = append(parts, k+"="+q.String())
	}
	return strings.Join(parts, ", ")
}

func describeTemplate(w *writer, t *corev1.PodTemplateSpec) {
	w.line(0, "Pod Template:")
	w.line(1, "Labels:\t%s", orNone(labels.FormatLabels(t.Labels)))
	w.line(1, "Containers:")
	for _, c := range t.Spec.Containers {
		w.line(2, "%s:\t%s", c.Name, c.Image)
	}
	if len(t.Spec.NodeSelector) > 0 {
		w.line(1, "Node-Selectors:\t%s", labels.FormatLabels(t.Spec.NodeSelector))
	}
}

func describeNode(w *writer, n *corev1.Node, f *diagnose.Facts) {
	w.line(0, "Status:\t%s", printers.NodeStatus(n))
	w.line(0, "Roles:\t%s", printers.NodeRoles(n))
	w.line(0, "Last Seen:\t%s", w.ago(diagnose.LastSeenNode(n, f)))
	info := n.Status.NodeInfo
	w.line(0, "System Info:")
	w.line(1, "Agent Version:\t%s", info.KubeletVersion)
	w.line(1, "OS Image:\t%s", info.OSImage)
	w.line(1, "Kernel Version:\t%s", info.KernelVersion)
	w.line(1, "Architecture:\t%s", info.Architecture)
	w.line(1, "Container Runtime:\t%s", info.ContainerRuntimeVersion)
	if len(n.Status.Addresses) > 0 {
		w.line(0, "Addresses:")
		for _, a := range n.Status.Addresses {
			w.line(1, "%s:\t%s", a.Type, a.Address)
		}
	}
	w.line(0, "PodCIDR:\t%s", orNone(n.Spec.PodCIDR))
	if len(n.Spec.Taints) > 0 {
		var ts []string
		for _, t := range n.Spec.Taints {
			ts = append(ts, t.ToString())
		}
		w.line(0, "Taints:\t%s", strings.Join(ts, ", "))
	}
	w.line(0, "Unschedulable:\t%t", n.Spec.Unschedulable)
	if len(n.Status.Conditions) > 0 {
		w.line(0, "Conditions:")
		w.line(1, "Type\tStatus\tLastHeartbeatTime\tReason\tMessage")
		for _, c := range n.Status.Conditions {
			w.line(1, "%s\t%s\t%s\t%s\t%s", c.Type, c.Status, w.ago(c.LastHeartbeatTime.Time), c.Reason, c.Message)
		}
	}
	if len(n.Status.Capacity) > 0 {
		w.line(0, "Capacity:\t%s", resources(n.Status.Capacity))
	}
	var pods []string
	for _, p := range f.Pods {
		if p.Spec.NodeName == n.Name {
			pods = append(pods, fmt.Sprintf("%s/%s\t%s", p.Namespace, p.Name, printers.PodStatus(&p)))
		}
	}
	sort.Strings(pods)
	w.line(0, "Pods:\t(%d)", len(pods))
	for _, p := range pods {
		w.line(1, "%s", p)
	}
}

func describeDeployment(w *writer, d *appsv1.Deployment) {
	st := d.Status
	w.line(0, "Selector:\t%s", selector(d.Spec.Selector))
	w.line(0, "Replicas:\t%d desired | %d updated | %d total | %d available | %d unavailable",
		ptrOr(d.Spec.Replicas, 1), st.UpdatedReplicas, st.Replicas, st.AvailableReplicas, st.UnavailableReplicas)
	w.line(0, "StrategyType:\t%s", d.Spec.Strategy.Type)
	if ru := d.Spec.Strategy.RollingUpdate; ru != nil && ru.MaxUnavailable != nil && ru.MaxSurge != nil {
		w.line(0, "RollingUpdateStrategy:\t%s max unavailable, %s max surge", ru.MaxUnavailable.String(), ru.MaxSurge.String())
	}
	if rev := d.Annotations["deployment.kubernetes.io/revision"]; rev != "" {
		w.line(0, "Revision:\t%s", rev)
	}
	describeTemplate(w, &d.Spec.Template)
	if len(st.Conditions) > 0 {
		w.line(0, "Conditions:")
		w.line(1, "Type\tStatus\tReason\tMessage")
		for _, c := range st.Conditions {
			w.line(1, "%s\t%s\t%s\t%s", c.Type, c.Status, c.Reason, c.Message)
		}
	}
}

func describeDaemonSet(w *writer, ds *appsv1.DaemonSet) {
	st := ds.Status
	w.line(0, "Selector:\t%s", selector(ds.Spec.Selector))
	w.line(0, "Node-Selector:\t%s", orNone(labels.FormatLabels(ds.Spec.Template.Spec.NodeSelector)))
	w.line(0, "Desired Number of Nodes Scheduled:\t%d", st.DesiredNumberScheduled)
	w.line(0, "Current Number of Nodes Scheduled:\t%d", st.CurrentNumberScheduled)
	w.line(0, "Number of Nodes Scheduled with Up-to-date Pods:\t%d", st.UpdatedNumberScheduled)
	w.line(0, "Number of Nodes Scheduled with Available Pods:\t%d", st.NumberAvailable)
	w.line(0, "Number of Nodes Misscheduled:\t%d", st.NumberMisscheduled)
	w.line(0, "Pods Status:\t%d Ready / %d Unavailable", st.NumberReady, st.NumberUnavailable)
	describeTemplate(w, &ds.Spec.Template)
}

func describeService(w *writer, s *corev1.Service, f *diagnose.Facts) {
	w.line(0, "Selector:\t%s", orNone(labels.FormatLabels(s.Spec.Selector)))
	w.line(0, "Type:\t%s", orDefault(string(s.Spec.Type), "ClusterIP"))
	w.line(0, "IP:\t%s", orNone(s.Spec.ClusterIP))
	if s.Spec.ExternalName != "" {
		w.line(0, "External Name:\t%s", s.Spec.ExternalName)
	}
	for _, p := range s.Spec.Ports {
		name := orDefault(p.Name, "<unset>")
		w.line(0, "Port:\t%s  %d/%s", name, p.Port, orDefault(string(p.Protocol), "TCP"))
		w.line(0, "TargetPort:\t%s", p.TargetPort.String())
		if p.NodePort != 0 {
			w.line(0, "NodePort:\t%s  %d/%s", name, p.NodePort, orDefault(string(p.Protocol), "TCP"))
		}
	}
	var addrs []string
	for _, es := range f.EndpointSlices {
		if es.Namespace != s.Namespace || es.Labels["kubernetes.io/service-name"] != s.Name {
			continue
		}
		for _, e := range es.Endpoints {
			for _, a := range e.Addresses {
				if !diagnose.EndpointReady(e) {
					a += " (not ready)"
				}
				addrs = append(addrs, a)
			}
		}
	}
	w.line(0, "Endpoints:\t%s", orNone(strings.Join(addrs, ",")))
}

func describeEndpointSlice(w *writer, es *discoveryv1.EndpointSlice) {
	w.line(0, "AddressType:\t%s", es.AddressType)
	var ports []string
	for _, p := range es.Ports {
		ports = append(ports, fmt.Sprintf("%s %d/%s", strOr(p.Name), ptrOr(p.Port, 0), orDefault(string(ptrOr(p.Protocol, "")), "TCP")))
	}
	w.line(0, "Ports:\t%s", orNone(strings.Join(ports, ", ")))
	w.line(0, "Endpoints:")
	for _, e := range es.Endpoints {
		w.line(1, "- Addresses:\t%s", strings.Join(e.Addresses, ","))
		w.line(2, "Conditions:")
		w.line(3, "Ready:\t%s", boolOr(e.Conditions.Ready))
		w.line(3, "Serving:\t%s", boolOr(e.Conditions.Serving))
		w.line(3, "Terminating:\t%s", boolOr(e.Conditions.Terminating))
		if e.TargetRef != nil {
			w.line(2, "TargetRef:\t%s/%s", e.TargetRef.Kind, e.TargetRef.Name)
		}
		if e.NodeName != nil {
			w.line(2, "NodeName:\t%s", *e.NodeName)
		}
	}
}

func describeGitSource(w *writer, g *v1alpha1.GitSource) {
	w.line(0, "URL:\t%s", g.Spec.URL)
	w.line(0, "Ref:\t%s", printers.GitRef(g.Spec.Ref))
	if len(g.Spec.Paths) > 0 {
		w.line(0, "Paths:\t%s", strings.Join(g.Spec.Paths, ", "))
	}
	if g.Spec.Interval != nil {
		w.line(0, "Interval:\t%s", g.Spec.Interval.Duration)
	}
	w.line(0, "Suspended:\t%t", g.Spec.Suspend)
	st := g.Status
	w.line(0, "Applied Commit:\t%s", orNone(st.LastAppliedCommit))
	w.line(0, "Attempted Commit:\t%s", orNone(st.LastAttemptedCommit))
	if st.LastAppliedTime != nil {
		w.line(0, "Applied:\t%s", w.ago(st.LastAppliedTime.Time))
	}
	w.line(0, "Inventory:\t%d objects", len(st.Inventory))
	if len(st.Conditions) > 0 {
		w.line(0, "Conditions:")
		w.line(1, "Type\tStatus\tReason\tAge\tMessage")
		for _, c := range st.Conditions {
			w.line(1, "%s\t%s\t%s\t%s\t%s", c.Type, c.Status, c.Reason, w.ago(c.LastTransitionTime.Time), firstLine(c.Message))
		}
	}
	if len(st.History) > 0 {
		w.line(0, "History:")
		w.line(1, "Commit\tResult\tWhen\tCreated\tUpdated\tPruned\tMessage")
		for _, a := range st.History {
			w.line(1, "%s\t%s\t%s\t%d\t%d\t%d\t%s", printers.ShortCommit(a.Commit), a.Result, w.ago(a.Time.Time), a.Created, a.Updated, a.Pruned, firstLine(a.Message))
		}
	}
}

func describeRolloutPolicy(w *writer, rp *v1alpha1.RolloutPolicy) {
	s := rp.Spec
	w.line(0, "Selector:\t%s", selector(s.Selector))
	w.line(0, "Waves:")
	for i, wv := range s.Waves {
		takes := "every device left"
		switch {
		case wv.NodeSelector != nil:
			takes = "devices matching " + selector(wv.NodeSelector)
		case wv.Percent != nil:
			takes = fmt.Sprintf("%d%% of the devices left", *wv.Percent)
		}
		w.line(1, "%d. %s:\t%s", i+1, wv.Name, takes)
	}
	c := s.SuccessCriteria
	maxFailures := "<unset>"
	if c.MaxFailures != nil {
		maxFailures = c.MaxFailures.String()
	}
	w.line(0, "Success Criteria:\tReady %ds on the new version, at most %s failed per wave, timeout %ds",
		ptrOr(c.ReadySeconds, 0), maxFailures, ptrOr(c.TimeoutSeconds, 0))
	w.line(0, "On Failure:\t%s", orNone(string(s.OnFailure)))
	w.line(0, "Paused:\t%t", s.Paused)
	if len(rp.Status.Conditions) > 0 {
		w.line(0, "Conditions:")
		w.line(1, "Type\tStatus\tReason\tMessage")
		for _, cd := range rp.Status.Conditions {
			w.line(1, "%s\t%s\t%s\t%s", cd.Type, cd.Status, cd.Reason, firstLine(cd.Message))
		}
	}
	if len(rp.Status.Workloads) == 0 {
		w.line(0, "Rollouts:\t<none>")
		return
	}
	w.line(0, "Rollouts:")
	for _, wl := range rp.Status.Workloads {
		w.line(1, "%s %s:\t%s, revision %s (from %s)", wl.Kind, wl.Name, wl.Phase, orNone(wl.Revision), orNone(wl.PreviousRevision))
		if wl.CurrentWave != "" {
			w.line(2, "Current Wave:\t%s", wl.CurrentWave)
		}
		if wl.Message != "" {
			w.line(2, "Message:\t%s", firstLine(wl.Message))
		}
		if len(wl.Waves) > 0 {
			w.line(2, "Wave\tDevices\tDone\tFailed")
			for _, ws := range wl.Waves {
				w.line(2, "%s\t%d\t%d\t%d", ws.Name, ws.Devices, ws.Done, ws.Failed)
			}
		}
		for _, ws := range wl.Waves {
			for _, f := range ws.FailedDevices {
				w.line(2, "Failed:\t%s (wave %s): %s %s", f.Node, ws.Name, f.Reason, firstLine(f.Message))
			}
		}
		for _, cd := range wl.Conditions {
			w.line(2, "Condition:\t%s=%s %s %s", cd.Type, cd.Status, cd.Reason, firstLine(cd.Message))
		}
	}
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return s
}

func selector(s *metav1.LabelSelector) string {
	sel, err := metav1.LabelSelectorAsSelector(s)
	if err != nil || sel.Empty() {
		return "<none>"
	}
	return sel.String()
}

func sortedKeys[V any, K ~string](m map[K]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, string(k))
	}
	sort.Strings(out)
	return out
}

func ptrOr[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}

func strOr(p *string) string {
	if p == nil || *p == "" {
		return "<unset>"
	}
	return *p
}

func boolOr(p *bool) string {
	if p == nil {
		return "<unset>"
	}
	return fmt.Sprint(*p)
}

func orNone(s string) string { return orDefault(s, "<none>") }

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
