package waves

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"sort"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"flotilla.dev/flotilla/api/v1alpha1"
)

// None is the wave of a device no wave takes: it gets the new version only
// once every wave has succeeded.
const None = -1

// Workload names a workload a policy stages.
type Workload struct {
	Kind, Name string
}

// Identity is what percent waves hash with a device's name: the policy and
// the workload, so that two workloads (or two policies) do not always pick
// the same unlucky devices, while one workload picks the same ones every
// time it is evaluated.
func Identity(rp *v1alpha1.RolloutPolicy, w Workload) string {
	return rp.Namespace + "/" + rp.Name + "/" + w.Kind + "/" + w.Name
}

// Assign puts each of nodes (the devices that run the workload) in the
// first wave that takes it, by index into rp.Spec.Waves, or None. A
// nodeSelector wave takes the matching devices left; a percent wave the
// given share of the devices left, rounded up, those with the smallest
// hash of identity and node name; a wave with neither takes all left.
func Assign(rp *v1alpha1.RolloutPolicy, identity string, nodes []*corev1.Node) (map[string]int, error) {
	out := make(map[string]int, len(nodes))
	left := make([]*corev1.Node, 0, len(nodes))
	for _, n := range nodes {
		out[n.Name] = None
		left = append(left, n)
	}
	for i, w := range rp.Spec.Waves {
		var taken, rest []*corev1.Node
		switch {
		case w.NodeSelector != nil:
			sel, err := metav1.LabelSelectorAsSelector(w.NodeSelector)
			if err != nil {
				return nil, fmt.Errorf("rolloutpolicy %s/%s: wave %q: nodeSelector: %w", rp.Namespace, rp.Name, w.Name, err)
			}
			for _, n := range left {
				if sel.Matches(labels.Set(n.Labels)) {
					taken = append(taken, n)
				} else {
					rest = append(rest, n)
				}
			}
		case w.Percent != nil:
			ranked := append([]*corev1.Node(nil), left...)
			keys := make(map[string]uint64, len(ranked))
			for _, n := range ranked {
				keys[n.Name] = rank(identity, n.Name)
			}
			sort.Slice(ranked, func(a, b int) bool {
				ka, kb := keys[ranked[a].Name], keys[ranked[b].Name]
				if ka != kb {
					return ka < kb
				}
				return ranked[a].Name < ranked[b].Name
			})
			k := (len(ranked)*int(*w.Percent) + 99) / 100
			taken, rest = ranked[:k], ranked[k:]
		default:
			taken = left
		}
		for _, n := range taken {
			out[n.Name] = i
		}
		left = rest
	}
	return out, nil
}

// rank orders devices for percent waves: a hash, so the choice is spread
// over the fleet and does not follow naming (shop-001 … shop-010 are often
// one region), and stable, so evaluating again never reshuffles.
func rank(identity, node string) uint64 {
	h := sha256.Sum256([]byte(identity + "\x00" + node))
	return binary.BigEndian.Uint64(h[:8])
}

// WaveIndex is the index of the named wave, or -1.
func WaveIndex(rp *v1alpha1.RolloutPolicy, name string) int {
	for i, w := range rp.Spec.Waves {
		if w.Name == name {
			return i
		}
	}
	return -1
}

// PolicyFor returns the policy of policies (of the workload's namespace)
// that stages a workload with these labels: the first by name whose
// selector matches, so that two overlapping policies never both drive
// one workload.
func PolicyFor(policies []*v1alpha1.RolloutPolicy, workloadLabels map[string]string) *v1alpha1.RolloutPolicy {
	sorted := append([]*v1alpha1.RolloutPolicy(nil), policies...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	for _, rp := range sorted {
		if rp.DeletionTimestamp == nil && Selects(rp, workloadLabels) {
			return rp
		}
	}
	return nil
}

// Selects reports whether rp's selector matches the labels.
func Selects(rp *v1alpha1.RolloutPolicy, workloadLabels map[string]string) bool {
	if rp.Spec.Selector == nil {
		return false
	}
	sel, err := metav1.LabelSelectorAsSelector(rp.Spec.Selector)
	if err != nil || sel.Empty() {
		return false
	}
	return sel.Matches(labels.Set(workloadLabels))
}

// Find returns the status of workload w in rp, or nil.
func Find(rp *v1alpha1.RolloutPolicy, w Workload) *v1alpha1.WorkloadRollout {
	for i := range rp.Status.Workloads {
		if s := &rp.Status.Workloads[i]; s.Kind == w.Kind && s.Name == w.Name {
			return s
		}
	}
	return nil
}

// Stable is the revision devices fall back to when a rollout to a new
// template starts after st: the revision st completed, or, when st was
// held, rolled back or still going, the one it started from — an
// interrupted rollout's version never becomes the fallback.
func Stable(st *v1alpha1.WorkloadRollout) string {
	if st == nil {
		return ""
	}
	if st.Phase == v1alpha1.RolloutComplete {
		return st.Revision
	}
	return st.PreviousRevision
}

// Plan says which version each device of a staged workload runs.
type Plan struct {
	// Revision is the hash of the template being rolled out; Previous the
	// hash the devices outside admitted waves keep.
	Revision, Previous string
	// Admitted are the waves (by index) whose devices may run Revision.
	// A device no wave takes is admitted only once the rollout completes,
	// and then Plan is nil.
	Admitted int
	// Frozen is the wave (by index) a held rollout stopped in, or None:
	// its devices stay on whichever of the two revisions they run, so
	// that a pause holds everything where it is.
	Frozen int
	// Policy is the name of the RolloutPolicy the plan comes from, and
	// CurrentWave the wave its rollout is at (empty before the rollout loop has
	// recorded the template): what a workload's status names as the
	// reason it waits.
	Policy, CurrentWave string
	wave                map[string]int
}

// Admits reports whether node may run the new revision.
func (p *Plan) Admits(node string) bool {
	w, ok := p.wave[node]
	return ok && w != None && w < p.Admitted
}

// Holds reports whether node is in the frozen wave of a held rollout.
func (p *Plan) Holds(node string) bool {
	w, ok := p.wave[node]
	return ok && p.Frozen != None && w == p.Frozen
}

// Wave is node's wave index (None when no wave takes it).
func (p *Plan) Wave(node string) int {
	if w, ok := p.wave[node]; ok {
		return w
	}
	return None
}

// PlanFor is the plan of workload w, whose current template hashes to
// revision, under rp, for the devices nodes; nil means every device may
// run revision (no rollout is staged: the policy has not seen the workload
// yet, or the rollout is complete, or revision is the version the devices
// fell back to).
//
// A template the rollout loop has not yet recorded is held entirely on
// the stable revision: the DaemonSet loop may see a new template before
// the rollout loop does, and must not let it through meanwhile.
func PlanFor(rp *v1alpha1.RolloutPolicy, w Workload, revision string, nodes []*corev1.Node) (*Plan, error) {
	st := Find(rp, w)
	if st == nil {
		return nil, nil
	}
	p := &Plan{Revision: revision, Frozen: None, Policy: rp.Name}
	if st.Revision != revision {
		p.Previous = Stable(st)
	} else {
		p.Previous = st.PreviousRevision
		p.CurrentWave = st.CurrentWave
		switch st.Phase {
		case v1alpha1.RolloutComplete:
			return nil, nil
		case v1alpha1.RolloutRolledBack:
			// The failed wave goes back; the waves before it met the
			// criteria and keep the new version.
			p.Admitted = WaveIndex(rp, st.CurrentWave)
		case v1alpha1.RolloutPaused:
			p.Admitted = WaveIndex(rp, st.CurrentWave) + 1
			p.Frozen = p.Admitted - 1
		default:
			p.Admitted = WaveIndex(rp, st.CurrentWave) + 1
		}
		if p.Admitted < 0 || (p.Admitted == 0 && st.Phase != v1alpha1.RolloutRolledBack) {
			// The wave was renamed or removed under a running rollout:
			// hold rather than guess.
			p.Admitted, p.Frozen = 0, None
		}
	}
	if p.Previous == "" || p.Previous == revision {
		return nil, nil
	}
	wave, err := Assign(rp, Identity(rp, w), nodes)
	if err != nil {
		return nil, err
	}
	p.wave = wave
	return p, nil
}
