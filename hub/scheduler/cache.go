package scheduler

import (
	"errors"
	"maps"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"flotilla.dev/flotilla/api/podutil"
	"flotilla.dev/flotilla/api/scheduling"
	"flotilla.dev/flotilla/internal/controlloop"
)

// ErrNoNodesAvailable is kube-scheduler's answer when there is no node at all.
var ErrNoNodesAvailable = errors.New("no nodes available to schedule pods")

// ErrAlreadyAssumed is returned by Schedule for a pod whose placement is
// already assumed (its binding is in flight).
var ErrAlreadyAssumed = errors.New("pod is already assumed on a node")

// CacheConfig tunes the scheduling algorithm.
type CacheConfig struct {
	// TopologyKey is the node label whose values are spread across
	// (besides single nodes). Default topology.kubernetes.io/zone.
	TopologyKey string
	// PercentageOfNodesToScore bounds how many feasible nodes are looked
	// for before scoring, as kube-scheduler's option of the same name:
	// 0 is adaptive (50% minus 1% per 125 nodes, at least 5%), 100 looks
	// at every node. At least 100 feasible nodes are always looked for.
	PercentageOfNodesToScore int
}

// Cache holds every node and the pods bound (or assumed) to it, with the
// sums the filters need precomputed, and places pods on it. It is safe for
// concurrent use: informer handlers feed it while the scheduling loop
// reads it.
type Cache struct {
	topologyKey string
	percentage  int

	mu    sync.Mutex
	nodes map[string]*nodeInfo
	// order holds the schedulable (known) nodes; scans start where the last
	// one stopped so every node gets its turn, as in kube-scheduler.
	order []*nodeInfo
	next  int
	pods  map[string]*podState
	// workloads counts where each workload's pods are, per node and per
	// topology value, for spreading.
	workloads map[string]*workload
	// nodeGen counts changes of the known nodes' labels and membership;
	// domains caches each topology key's values for it.
	nodeGen uint64
	domains map[string]*keyDomains
	// zoneIDs numbers the topology values so scoring can index a slice.
	zoneIDs map[string]int
	// index finds the pods a selector matches, and the pods with
	// required anti-affinity (which every placement must respect) by term.
	index podIndex
	// nominated maps the pods preemption made room for to their node.
	nominated map[string]*nominee
	seq       uint64
	rng       *rand.Rand
	// The rest is scratch space reused between attempts (under mu) so
	// that scheduling a pod does not allocate per node.
	feasible    []*nodeInfo
	zoneScratch []int
	gen         uint64
}

// workload is where the pods of one workload are.
type workload struct {
	perNode map[*nodeInfo]int
	perZone map[int]int
}

// nodeInfo is a node as the filters see it, with the sums of the pods on it.
type nodeInfo struct {
	name          string
	known         bool // false while only pods name the node (informer lag or deleted node)
	labels        map[string]string
	zone          string
	zoneID        int // -1 without a topology value
	ready         bool
	unschedulable bool
	taints        []corev1.Taint // NoSchedule and NoExecute only
	allocatable   resources
	allowedPods   int64
	requested     resources
	nonZero       resources
	podCount      int64
	ports         []hostPort
	workloads     map[string]int // pods per workload on this node
	index         int            // in Cache.order, -1 when not there
	pods          map[string]*podState
	// nominees are pods waiting for the room preemption makes here: pods
	// of lower priority must not take it.
	nominees []*nominee
	// scratchCount is this node's count of the workload being scored,
	// valid when scratchGen equals Cache.gen.
	scratchGen   uint64
	scratchCount int
}

// nominee is a pod nominated to a node, with what it will need there.
type nominee struct {
	key      string
	node     string
	priority int32
	req      resources
}

// podState is what the cache remembers of a bound or assumed pod.
type podState struct {
	key      string
	node     string
	req      resources
	nonZero  resources
	ports    []hostPort
	workload string
	assumed  bool
	// For the filters that look at other pods: where the pod is and its
	// labels, and its required anti-affinity (which other pods must keep).
	namespace string
	labels    map[string]string
	anti      []podTerm
	// For preemption: who the pod is, how much it matters, how long the
	// cache has known it, and whether the scheduler is evicting it.
	name      string
	uid       types.UID
	priority  int32
	seq       uint64
	preempted bool
}

// NewCache returns an empty Cache.
func NewCache(cfg CacheConfig) *Cache {
	if cfg.TopologyKey == "" {
		cfg.TopologyKey = corev1.LabelTopologyZone
	}
	return &Cache{
		topologyKey: cfg.TopologyKey,
		percentage:  cfg.PercentageOfNodesToScore,
		nodes:       map[string]*nodeInfo{},
		pods:        map[string]*podState{},
		workloads:   map[string]*workload{},
		zoneIDs:     map[string]int{},
		index:       newPodIndex(),
		domains:     map[string]*keyDomains{},
		nominated:   map[string]*nominee{},
		rng:         rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64())),
	}
}

// podKey identifies a pod across renames of nothing: the UID when the
// pod has one, else namespace/name.
func podKey(pod *corev1.Pod) string {
	if pod.UID != "" {
		return string(pod.UID)
	}
	return controlloop.ObjectKey(pod)
}

// workloadKey groups the pods that should be spread: those of the same
// controller, or else those with the same labels in the same namespace.
func workloadKey(pod *corev1.Pod) string {
	if ref := metav1.GetControllerOfNoCopy(pod); ref != nil {
		return "owner:" + string(ref.UID)
	}
	if len(pod.Labels) == 0 {
		return ""
	}
	keys := make([]string, 0, len(pod.Labels))
	for k := range pod.Labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteString("labels:")
	b.WriteString(pod.Namespace)
	for _, k := range keys {
		b.WriteByte('/')
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(pod.Labels[k])
	}
	return b.String()
}

func nodeReady(node *corev1.Node) bool {
	for i := range node.Status.Conditions {
		c := &node.Status.Conditions[i]
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// SetNode adds or updates a node.
func (c *Cache) SetNode(node *corev1.Node) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.nodes[node.Name]
	if n == nil {
		n = newNodeInfo(node.Name)
		c.nodes[node.Name] = n
	}
	oldZone := n.zoneID
	if n.index < 0 || !maps.Equal(n.labels, node.Labels) {
		c.nodeGen++
	}
	n.known = true
	n.labels = node.Labels
	n.zone = node.Labels[c.topologyKey]
	n.zoneID = c.zoneID(n.zone)
	n.ready = nodeReady(node)
	n.unschedulable = node.Spec.Unschedulable
	n.taints = n.taints[:0]
	for _, t := range node.Spec.Taints {
		if t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute {
			n.taints = append(n.taints, t)
		}
	}
	n.allocatable = fromList(node.Status.Allocatable)
	n.allowedPods = 0
	if q, ok := node.Status.Allocatable[corev1.ResourcePods]; ok {
		n.allowedPods = q.Value()
	}
	if oldZone != n.zoneID {
		for w, cnt := range n.workloads {
			wl := c.workloads[w]
			addCount(wl.perZone, oldZone, -cnt)
			addCount(wl.perZone, n.zoneID, cnt)
		}
	}
	if n.index < 0 {
		n.index = len(c.order)
		c.order = append(c.order, n)
	}
}

// DeleteNode forgets a node; pods still bound to it keep their place in
// the cache until they are deleted too.
func (c *Cache) DeleteNode(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.nodes[name]
	if n == nil {
		return
	}
	c.removeFromOrder(n)
	n.known = false
	if n.podCount == 0 && len(n.nominees) == 0 {
		delete(c.nodes, name)
	}
}

func (c *Cache) removeFromOrder(n *nodeInfo) {
	if n.index < 0 {
		return
	}
	c.nodeGen++
	last := len(c.order) - 1
	c.order[n.index] = c.order[last]
	c.order[n.index].index = n.index
	c.order[last] = nil
	c.order = c.order[:last]
	n.index = -1
}

// keyDomains is the values one node label takes over the known nodes.
type keyDomains struct {
	gen    uint64
	values []string
}

// domainsOf returns the values key takes over the known nodes, computed
// again only after a node came, went or changed its labels: a spread
// constraint of a pod that may go anywhere counts every one of them, and a
// pass over thousands of nodes per pod was a tenth of a busy hub's CPU.
func (c *Cache) domainsOf(key string) []string {
	if d := c.domains[key]; d != nil && d.gen == c.nodeGen {
		return d.values
	}
	seen := map[string]bool{}
	var values []string
	for _, n := range c.order {
		if v, ok := n.labels[key]; ok && !seen[v] {
			seen[v] = true
			values = append(values, v)
		}
	}
	c.domains[key] = &keyDomains{gen: c.nodeGen, values: values}
	return values
}

func newNodeInfo(name string) *nodeInfo {
	return &nodeInfo{name: name, workloads: map[string]int{}, pods: map[string]*podState{}, index: -1, zoneID: -1}
}

func (c *Cache) zoneID(zone string) int {
	if zone == "" {
		return -1
	}
	id, ok := c.zoneIDs[zone]
	if !ok {
		id = len(c.zoneIDs)
		c.zoneIDs[zone] = id
	}
	return id
}

func addCount[K comparable](m map[K]int, k K, delta int) {
	if m[k] += delta; m[k] <= 0 {
		delete(m, k)
	}
}

// workloadAdd moves the count of workload w on node n by delta.
func (c *Cache) workloadAdd(n *nodeInfo, w string, delta int) {
	if w == "" {
		return
	}
	wl := c.workloads[w]
	if wl == nil {
		wl = &workload{perNode: map[*nodeInfo]int{}, perZone: map[int]int{}}
		c.workloads[w] = wl
	}
	addCount(n.workloads, w, delta)
	addCount(wl.perNode, n, delta)
	if n.zoneID >= 0 {
		addCount(wl.perZone, n.zoneID, delta)
	}
	if len(wl.perNode) == 0 {
		delete(c.workloads, w)
	}
}

// SetPod records a pod bound to a node (spec.nodeName set): a placement
// this cache assumed is confirmed, others are added. A terminated pod is
// removed, since it holds no resources any more.
func (c *Cache) SetPod(pod *corev1.Pod) {
	if pod.Spec.NodeName == "" {
		return
	}
	if podutil.IsTerminal(pod) {
		c.DeletePod(pod)
		return
	}
	st := newPodState(pod, pod.Spec.NodeName)
	c.mu.Lock()
	defer c.mu.Unlock()
	key := podKey(pod)
	if old := c.pods[key]; old != nil {
		st.seq = old.seq
		c.removePodLocked(key, old)
	}
	c.addPodLocked(key, st)
}

// DeletePod removes a pod, bound or assumed.
func (c *Cache) DeletePod(pod *corev1.Pod) {
	c.mu.Lock()
	defer c.mu.Unlock()
	key := podKey(pod)
	if old := c.pods[key]; old != nil {
		c.removePodLocked(key, old)
	}
}

// Forget drops a placement assumed by Schedule whose binding failed. A
// placement the informer has confirmed in the meantime is kept.
func (c *Cache) Forget(pod *corev1.Pod) {
	c.mu.Lock()
	defer c.mu.Unlock()
	key := podKey(pod)
	if old := c.pods[key]; old != nil && old.assumed {
		c.removePodLocked(key, old)
	}
}

// IsAssumed reports whether pod has a placement assumed but not yet seen
// bound.
func (c *Cache) IsAssumed(pod *corev1.Pod) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.pods[podKey(pod)]
	return st != nil && st.assumed
}

// NodeCount is the number of known nodes.
func (c *Cache) NodeCount() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.order)
}

func newPodState(pod *corev1.Pod, node string) *podState {
	return &podState{
		key:      podKey(pod),
		node:     node,
		req:      podRequests(pod, containerRequests),
		nonZero:  podRequests(pod, containerNonZero),
		ports:    podHostPorts(pod),
		workload: workloadKey(pod),

		namespace: pod.Namespace,
		labels:    pod.Labels,
		anti:      requiredAntiAffinity(pod),

		name:      pod.Name,
		uid:       pod.UID,
		priority:  scheduling.PodPriority(pod),
		preempted: pod.DeletionTimestamp != nil && preemptedByScheduler(pod),
	}
}

func (c *Cache) addPodLocked(key string, st *podState) {
	n := c.nodes[st.node]
	if n == nil {
		n = newNodeInfo(st.node)
		c.nodes[st.node] = n
	}
	c.pods[key] = st
	if st.seq == 0 {
		c.seq++
		st.seq = c.seq
	}
	n.pods[key] = st
	n.requested.add(st.req)
	n.nonZero.add(st.nonZero)
	n.podCount++
	n.ports = append(n.ports, st.ports...)
	c.workloadAdd(n, st.workload, 1)
	c.index.add(st)
}

func (c *Cache) removePodLocked(key string, st *podState) {
	delete(c.pods, key)
	c.index.remove(st)
	n := c.nodes[st.node]
	if n == nil {
		return
	}
	delete(n.pods, key)
	n.requested.sub(st.req)
	n.nonZero.sub(st.nonZero)
	n.podCount--
	for _, p := range st.ports {
		for i, q := range n.ports {
			if q == p {
				n.ports = append(n.ports[:i], n.ports[i+1:]...)
				break
			}
		}
	}
	c.workloadAdd(n, st.workload, -1)
	if !n.known && n.podCount == 0 && len(n.nominees) == 0 {
		delete(c.nodes, n.name)
	}
}

// preemptedByScheduler reports whether pod carries the DisruptionTarget
// condition a scheduler's preemption writes.
func preemptedByScheduler(pod *corev1.Pod) bool {
	for i := range pod.Status.Conditions {
		c := &pod.Status.Conditions[i]
		if c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue && c.Reason == corev1.PodReasonPreemptionByScheduler {
			return true
		}
	}
	return false
}

// SetNominated records pod's status.nominatedNodeName: while it waits for
// the room preemption makes there, pods of lower priority are placed as if
// it were already there. A bound, finished or unnominated pod holds nothing.
func (c *Cache) SetNominated(pod *corev1.Pod) {
	c.mu.Lock()
	defer c.mu.Unlock()
	key := podKey(pod)
	switch {
	case pod.Spec.NodeName != "" || pod.DeletionTimestamp != nil || podutil.IsTerminal(pod):
		c.nominateLocked(key, "", 0, resources{})
	case pod.Status.NominatedNodeName != "":
		c.nominateLocked(key, pod.Status.NominatedNodeName, scheduling.PodPriority(pod), podRequests(pod, containerRequests))
	}
	// An unbound pod without one keeps what the scheduler nominated
	// until its own status write comes back.
}

// Nominate records a nomination the scheduler just made, before the API
// echoes it back.
func (c *Cache) Nominate(pod *corev1.Pod, node string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.nominateLocked(podKey(pod), node, scheduling.PodPriority(pod), podRequests(pod, containerRequests))
}

// MarkPreempted notes that the scheduler is evicting these pods, before
// their DisruptionTarget condition comes back through the informer, so a
// retry of the preemptor does not pick more victims meanwhile.
func (c *Cache) MarkPreempted(victims []Victim) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, v := range victims {
		if st := c.pods[v.key]; st != nil {
			st.preempted = true
		}
	}
}

// Unnominate forgets pod's nomination.
func (c *Cache) Unnominate(pod *corev1.Pod) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.nominateLocked(podKey(pod), "", 0, resources{})
}

func (c *Cache) nominateLocked(key, node string, prio int32, req resources) {
	if old := c.nominated[key]; old != nil {
		if old.node == node {
			old.priority, old.req = prio, req
			return
		}
		delete(c.nominated, key)
		if n := c.nodes[old.node]; n != nil {
			for i, nm := range n.nominees {
				if nm == old {
					n.nominees = append(n.nominees[:i], n.nominees[i+1:]...)
					break
				}
			}
			if !n.known && n.podCount == 0 && len(n.nominees) == 0 {
				delete(c.nodes, n.name)
			}
		}
	}
	if node == "" {
		return
	}
	n := c.nodes[node]
	if n == nil {
		n = newNodeInfo(node)
		c.nodes[node] = n
	}
	nm := &nominee{key: key, node: node, priority: prio, req: req}
	c.nominated[key] = nm
	n.nominees = append(n.nominees, nm)
}
