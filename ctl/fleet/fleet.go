package fleet

import (
	"fmt"
	"io"
	"regexp"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/duration"
	metricsv1beta1 "k8s.io/metrics/pkg/apis/metrics/v1beta1"

	"flotilla.dev/flotilla/api/podutil"
	"flotilla.dev/flotilla/api/printers"
	"flotilla.dev/flotilla/api/v1alpha1"
	"flotilla.dev/flotilla/ctl/diagnose"
	"flotilla.dev/flotilla/ctl/term"
)

// Snapshot is what the hub holds, as read at one moment.
type Snapshot struct {
	diagnose.Facts
	Deployments []appsv1.Deployment
	DaemonSets  []appsv1.DaemonSet
	Services    []corev1.Service
	GitSources  []v1alpha1.GitSource
	// NodeMetrics are the devices' last usage (metrics.k8s.io); none
	// when the hub has none or the user may not read them.
	NodeMetrics []metricsv1beta1.NodeMetrics
}

// Report is the fleet at a glance.
type Report struct {
	Now             time.Time
	Online, Offline int
	OfflineDevices  []Device
	// LowDevices are the online devices running low (see LowCPUPercent).
	LowDevices            []Device
	ByArch, ByAgent       []Count
	Devices               []Device
	Sources               []Source
	Workloads             []Workload
	Problems              []diagnose.Finding
	PodsReady, PodsWanted int
}

// Count is one row of a breakdown: a value and how many devices are
// online and offline with it.
type Count struct {
	Value           string
	Online, Offline int
}

// Device is one device's line.
type Device struct {
	Name, Status, Arch, Agent string
	LastSeen                  time.Time
	Online                    bool
	PodsReady, Pods           int
	Usage                     Usage
}

// Source is one GitSource's line.
type Source struct {
	Name, Ref, Applied, Attempted, Ready, Message string
}

// Workload is one Deployment's or DaemonSet's rollout.
type Workload struct {
	Kind, Name                         string
	Desired, Updated, Ready, Available int32
	Done                               bool
}

// Summarize turns a snapshot into a report.
func Summarize(s *Snapshot) *Report {
	r := &Report{Now: s.Now}
	if r.Now.IsZero() {
		r.Now = time.Now()
		s.Now = r.Now
	}
	byArch, byAgent := map[string]*Count{}, map[string]*Count{}
	devices := map[string]*Device{}
	metrics := map[string]*metricsv1beta1.NodeMetrics{}
	for i := range s.NodeMetrics {
		metrics[s.NodeMetrics[i].Name] = &s.NodeMetrics[i]
	}
	for i := range s.Nodes {
		n := &s.Nodes[i]
		d := Device{Name: n.Name, Status: printers.NodeStatus(n), Arch: orUnknown(n.Status.NodeInfo.Architecture),
			Agent: orUnknown(n.Status.NodeInfo.KubeletVersion), LastSeen: diagnose.LastSeenNode(n, &s.Facts)}
		if a := n.Labels["kubernetes.io/arch"]; d.Arch == "<unknown>" && a != "" {
			d.Arch = a
		}
		d.Online = strings.HasPrefix(d.Status, "Ready")
		d.Usage = Usage{CPUPercent: -1, MemoryPercent: -1, DiskPercent: -1}
		if m := metrics[n.Name]; m != nil && d.Online {
			d.Usage = usageOf(n, m)
		}
		tally(byArch, d.Arch, d.Online)
		tally(byAgent, d.Agent, d.Online)
		if d.Online {
			r.Online++
		} else {
			r.Offline++
			r.OfflineDevices = append(r.OfflineDevices, d)
		}
		devices[n.Name] = &d
		if f := diagnose.Node(n, &s.Facts); !f.Healthy() {
			r.Problems = append(r.Problems, f)
		}
	}
	r.ByArch, r.ByAgent = counts(byArch), counts(byAgent)

	for i := range s.Pods {
		p := &s.Pods[i]
		if p.Status.Phase == corev1.PodSucceeded {
			continue
		}
		r.PodsWanted++
		ready := podutil.IsReady(p)
		if ready {
			r.PodsReady++
		}
		if d := devices[p.Spec.NodeName]; d != nil {
			d.Pods++
			if ready {
				d.PodsReady++
			}
		}
		if f := diagnose.Pod(p, &s.Facts); !f.Healthy() {
			// A pod on an offline device is covered by the device's finding.
			if f.Stage == diagnose.StageDevice && devices[p.Spec.NodeName] != nil {
				continue
			}
			r.Problems = append(r.Problems, f)
		}
	}
	for _, d := range devices {
		r.Devices = append(r.Devices, *d)
	}
	sort.Slice(r.Devices, func(i, j int) bool { return r.Devices[i].Name < r.Devices[j].Name })
	for _, d := range r.Devices {
		if len(d.Usage.Low) > 0 {
			r.LowDevices = append(r.LowDevices, d)
		}
	}
	sort.Slice(r.OfflineDevices, func(i, j int) bool { return r.OfflineDevices[i].LastSeen.Before(r.OfflineDevices[j].LastSeen) })

	for i := range s.GitSources {
		g := &s.GitSources[i]
		src := Source{Name: g.Namespace + "/" + g.Name, Ref: printers.GitRef(g.Spec.Ref),
			Applied: printers.ShortCommit(g.Status.LastAppliedCommit), Attempted: printers.ShortCommit(g.Status.LastAttemptedCommit), Ready: "Unknown"}
		for _, c := range g.Status.Conditions {
			if c.Type == v1alpha1.ConditionReady {
				src.Ready, src.Message = string(c.Status), firstLine(c.Message)
			}
		}
		r.Sources = append(r.Sources, src)
		if f := diagnose.GitSource(g, &s.Facts); !f.Healthy() {
			r.Problems = append(r.Problems, f)
		}
	}
	for i := range s.Deployments {
		d := &s.Deployments[i]
		want := int32(1)
		if d.Spec.Replicas != nil {
			want = *d.Spec.Replicas
		}
		f := diagnose.Deployment(d, &s.Facts)
		r.Workloads = append(r.Workloads, Workload{Kind: "deployment", Name: d.Namespace + "/" + d.Name, Desired: want,
			Updated: d.Status.UpdatedReplicas, Ready: d.Status.ReadyReplicas, Available: d.Status.AvailableReplicas, Done: f.Healthy()})
		if !f.Healthy() {
			r.Problems = append(r.Problems, f)
		}
	}
	for i := range s.DaemonSets {
		ds := &s.DaemonSets[i]
		f := diagnose.DaemonSet(ds, &s.Facts)
		st := ds.Status
		r.Workloads = append(r.Workloads, Workload{Kind: "daemonset", Name: ds.Namespace + "/" + ds.Name, Desired: st.DesiredNumberScheduled,
			Updated: st.UpdatedNumberScheduled, Ready: st.NumberReady, Available: st.NumberAvailable, Done: f.Healthy()})
		if !f.Healthy() {
			r.Problems = append(r.Problems, f)
		}
	}
	for i := range s.Services {
		if f := diagnose.Service(&s.Services[i], &s.Facts); !f.Healthy() {
			r.Problems = append(r.Problems, f)
		}
	}
	diagnose.Sort(r.Problems)
	return r
}

func tally(m map[string]*Count, v string, online bool) {
	c := m[v]
	if c == nil {
		c = &Count{Value: v}
		m[v] = c
	}
	if online {
		c.Online++
	} else {
		c.Offline++
	}
}

func counts(m map[string]*Count) []Count {
	out := make([]Count, 0, len(m))
	for _, c := range m {
		out = append(out, *c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Value < out[j].Value })
	return out
}

// Options shape the rendering.
type Options struct {
	Style term.Style
	// MaxDevices caps the per-device lines (0: all); large fleets show the
	// devices with the fewest ready pods first.
	MaxDevices int
	// MaxProblems caps the problem list (0: all).
	MaxProblems int
}

// Render writes the report.
func Render(w io.Writer, r *Report, o Options) error {
	st := o.Style
	tw := &table{}
	line := func(format string, args ...any) { tw.add(fmt.Sprintf(format, args...)) }
	ago := func(t time.Time) string {
		if t.IsZero() {
			return "never"
		}
		return duration.HumanDuration(r.Now.Sub(t)) + " ago"
	}

	offline := fmt.Sprintf("%d offline", r.Offline)
	if r.Offline > 0 {
		offline = st.Red(offline)
	}
	line("%s\t%s, %s", st.Bold("DEVICES"), st.Green(fmt.Sprintf("%d online", r.Online)), offline)
	line("  pods ready\t%d/%d", r.PodsReady, r.PodsWanted)
	if len(r.ByArch) > 0 {
		line("  by architecture\t%s", breakdown(r.ByArch))
		line("  by agent version\t%s", breakdown(r.ByAgent))
	}
	for _, d := range r.OfflineDevices {
		line("  %s\t%s, last seen %s", st.Red(d.Name), d.Status, ago(d.LastSeen))
	}
	for _, d := range r.LowDevices {
		line("  %s\trunning low: %s", st.Yellow(d.Name), strings.Join(d.Usage.Low, ", "))
	}
	line("")

	if len(r.Devices) > 0 {
		devs := append([]Device(nil), r.Devices...)
		if o.MaxDevices > 0 && len(devs) > o.MaxDevices {
			sort.SliceStable(devs, func(i, j int) bool {
				return devs[i].Pods-devs[i].PodsReady > devs[j].Pods-devs[j].PodsReady
			})
			devs = devs[:o.MaxDevices]
		}
		line("%s", st.Bold("DEVICE"))
		line("  NAME\tSTATUS\tARCH\tAGENT\tPODS READY\tCPU\tMEMORY\tDISK\tLAST SEEN")
		for _, d := range devs {
			status := d.Status
			if !d.Online {
				status = st.Red(status)
			}
			pods := fmt.Sprintf("%d/%d", d.PodsReady, d.Pods)
			if d.PodsReady < d.Pods {
				pods = st.Yellow(pods)
			}
			cpu, mem, disk := pct(st, d.Usage.CPUPercent, LowCPUPercent), pct(st, d.Usage.MemoryPercent, LowMemoryPercent), pct(st, d.Usage.DiskPercent, 100-LowDiskFreePercent)
			line("  %s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s", d.Name, status, d.Arch, d.Agent, pods, cpu, mem, disk, ago(d.LastSeen))
		}
		if len(devs) < len(r.Devices) {
			line("  … %d more devices (all pods ready first hidden; see flotctl get nodes)", len(r.Devices)-len(devs))
		}
		line("")
	}

	if len(r.Sources) > 0 {
		line("%s", st.Bold("SOURCES"))
		line("  NAME\tREF\tAPPLIED\tATTEMPTED\tREADY\tMESSAGE")
		for _, s := range r.Sources {
			ready := s.Ready
			switch ready {
			case "True":
				ready = st.Green(ready)
			case "False":
				ready = st.Red(ready)
			}
			line("  %s\t%s\t%s\t%s\t%s\t%s", s.Name, s.Ref, s.Applied, s.Attempted, ready, s.Message)
		}
		line("")
	}

	if len(r.Workloads) > 0 {
		line("%s", st.Bold("WORKLOADS"))
		line("  KIND\tNAME\tDESIRED\tUP-TO-DATE\tREADY\tAVAILABLE\tROLLOUT")
		for _, wl := range r.Workloads {
			state := st.Green("done")
			if !wl.Done {
				state = st.Yellow("in progress " + bar(wl.Updated, wl.Ready, wl.Desired))
			}
			line("  %s\t%s\t%d\t%d\t%d\t%d\t%s", wl.Kind, wl.Name, wl.Desired, wl.Updated, wl.Ready, wl.Available, state)
		}
		line("")
	}
	if err := tw.flush(w); err != nil {
		return err
	}

	if r.Online+r.Offline == 0 && len(r.Problems) == 0 {
		_, err := fmt.Fprintln(w, "No device has joined yet: create a join token with `flotilla-hub token create` and start flotilla-agent on a device.")
		return err
	}
	if len(r.Problems) == 0 {
		_, err := fmt.Fprintln(w, st.Green("No problems: every device is online and every workload is ready."))
		return err
	}
	fmt.Fprintf(w, "%s (%d, worst first)\n", st.Bold("PROBLEMS"), len(r.Problems))
	probs := r.Problems
	if o.MaxProblems > 0 && len(probs) > o.MaxProblems {
		probs = probs[:o.MaxProblems]
	}
	for _, p := range probs {
		sev := strings.ToUpper(p.Severity.String())
		switch p.Severity {
		case diagnose.Critical:
			sev = st.Red(sev)
		case diagnose.Warning:
			sev = st.Yellow(sev)
		default:
			sev = st.Dim(sev)
		}
		fmt.Fprintf(w, "  %-8s %s: %s\n", sev, p.Object, p.Summary)
		fmt.Fprintf(w, "           owner: %s (stuck at %s)\n", p.Owner, p.Stage)
	}
	if len(probs) < len(r.Problems) {
		fmt.Fprintf(w, "  … %d more\n", len(r.Problems)-len(probs))
	}
	_, err := fmt.Fprintln(w, "Run `flotctl describe KIND NAME` for the details of a problem.")
	return err
}

// pct shows a usage percentage, in yellow from low on; "-" when unknown
// (no report from the device, or metrics off on it).
func pct(st term.Style, p, low int) string {
	if p < 0 {
		return "-"
	}
	s := fmt.Sprintf("%d%%", p)
	if p >= low {
		s = st.Yellow(s)
	}
	return s
}

func breakdown(cs []Count) string {
	var parts []string
	for _, c := range cs {
		s := fmt.Sprintf("%s %d", c.Value, c.Online)
		if c.Offline > 0 {
			s += fmt.Sprintf(" (+%d offline)", c.Offline)
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, ", ")
}

// bar draws a rollout as ten cells: updated and ready (#), updated (+),
// still to do (.).
func bar(updated, ready, desired int32) string {
	if desired <= 0 {
		return ""
	}
	const width = 10
	r := int(min(ready, updated)) * width / int(desired)
	u := int(updated)*width/int(desired) - r
	r, u = min(r, width), max(min(u, width-r), 0)
	return "[" + strings.Repeat("#", r) + strings.Repeat("+", u) + strings.Repeat(".", width-r-u) + "]"
}

func orUnknown(s string) string {
	if s == "" {
		return "<unknown>"
	}
	return s
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return s
}

// table aligns tab-separated cells by their visible width, so colour
// escapes do not push columns apart (text/tabwriter counts them). A line
// without tabs ends a block of aligned lines, as in text/tabwriter.
type table struct{ lines []string }

func (t *table) add(l string) { t.lines = append(t.lines, l) }

var ansi = regexp.MustCompile("\x1b\\[[0-9;]*m")

func visible(s string) int { return utf8.RuneCountInString(ansi.ReplaceAllString(s, "")) }

func (t *table) flush(w io.Writer) error {
	var out strings.Builder
	for i := 0; i < len(t.lines); {
		j := i
		for j < len(t.lines) && strings.Contains(t.lines[j], "\t") {
			j++
		}
		if j == i {
			out.WriteString(t.lines[i] + "\n")
			i++
			continue
		}
		var widths []int
		rows := make([][]string, 0, j-i)
		for _, l := range t.lines[i:j] {
			cells := strings.Split(l, "\t")
			for c, cell := range cells {
				if c >= len(widths) {
					widths = append(widths, 0)
				}
				widths[c] = max(widths[c], visible(cell))
			}
			rows = append(rows, cells)
		}
		for _, cells := range rows {
			var b strings.Builder
			for c, cell := range cells {
				b.WriteString(cell)
				if c < len(cells)-1 {
					b.WriteString(strings.Repeat(" ", widths[c]-visible(cell)+2))
				}
			}
			out.WriteString(strings.TrimRight(b.String(), " ") + "\n")
		}
		i = j
	}
	t.lines = nil
	_, err := io.WriteString(w, out.String())
	return err
}
