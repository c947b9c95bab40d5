package fleetsim

import (
	"context"
	"fmt"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/pager"

	"flotilla.dev/flotilla/bench/procstat"
)

// Result are the figures of one run.
type Result struct {
	Devices, Sites int
	// Joined is how long the devices took to join and report Ready.
	Joined time.Duration
	// Hub and Sim are the hub's and the simulator's CPU (cores) and RSS
	// in steady state: every device watching and renewing its Lease.
	HubCores, SimCores float64
	HubRSS, SimRSS     int64
	// ListP99 is a user's `get pods -A` (pages of 500) and ApplyP99 a
	// change to one object, under that load.
	ListP99, ApplyP99 time.Duration
	// EventP50/P99: from a DaemonSet's creation to its pod reaching each
	// device's watch; Ready: until the DaemonSet counts every pod Ready.
	EventP50, EventP99, Ready time.Duration
	// NotReady counts the devices whose pod was not Ready 10 minutes
	// after the DaemonSet's creation (Ready is then those 10 minutes).
	NotReady int
	// FanoutP50/P99: from an admin's watch of every pod seeing a pod
	// bound to a device to that device's watch seeing it: the fan-out
	// alone, without the controllers' and the scheduler's pace.
	FanoutP50, FanoutP99 time.Duration
	// BoundP50/P99: from the DaemonSet's creation to its pods bound, as
	// the admin's watch saw them: what the controllers and the
	// scheduler take.
	BoundP50, BoundP99 time.Duration
	// MadeP50/P99: from the DaemonSet's creation to its pods created
	// (the DaemonSet loop alone).
	MadeP50, MadeP99 time.Duration
	// HubPeakRSS is the hub's RSS after the rollout.
	HubPeakRSS int64
	// Reconnected is, after a hub restart, how long until every device
	// had all its watches open again, and RestartPeakRSS the new hub's
	// largest RSS meanwhile (0 when the run restarts no hub).
	Reconnected    time.Duration
	RestartPeakRSS int64
	// HubBack is how long the new hub took to answer after the restart
	// began, and BackP50/P90 when half and nine tenths of the devices had
	// their watches back: a storm's shape, a slow climb or a long tail.
	HubBack, BackP50, BackP90 time.Duration
	// RestartErr is why the restart figures are missing, if they are.
	RestartErr error
}

// Hub is the hub process a run measures.
type Hub struct {
	// PID is the process (0: no hub figures).
	PID int
	// Restart, when set, stops the hub and starts it again on the same
	// data dir and address, returning the new PID.
	Restart func(context.Context) (int, error)
}

// Lines are the figures as `make bench` prints them.
func (r Result) Lines() []string {
	name := fmt.Sprintf("fleet of %d devices (%d sites)", r.Devices, r.Sites)
	return []string{
		fmt.Sprintf("%-44s hub %.2f cores %d MB steady  (simulator %.2f cores %d MB; target ≤ 1 core, ≤ 1 GB at 10,000)",
			name, r.HubCores, r.HubRSS>>20, r.SimCores, r.SimRSS>>20),
		fmt.Sprintf("%-44s DaemonSet created → its pod on every device's watch p50 %v p99 %v, %s %v, hub RSS %d MB",
			name, r.EventP50.Round(time.Millisecond), r.EventP99.Round(time.Millisecond), r.readyWord(), r.Ready.Round(time.Millisecond), r.HubPeakRSS>>20),
		fmt.Sprintf("%-44s binding seen by an admin watch → by its device's watch p50 %v p99 %v  (target p99 ≤ 1 s); created → pods made p50 %v p99 %v → bound p50 %v p99 %v",
			name, r.FanoutP50.Round(time.Millisecond), r.FanoutP99.Round(time.Millisecond), r.MadeP50.Round(time.Millisecond), r.MadeP99.Round(time.Millisecond),
			r.BoundP50.Round(time.Millisecond), r.BoundP99.Round(time.Millisecond)),
		fmt.Sprintf("%-44s get pods -A p99 %v, apply p99 %v under that load; joined in %v",
			name, r.ListP99.Round(time.Millisecond), r.ApplyP99.Round(time.Millisecond), r.Joined.Round(time.Second)),
		r.restartLine(name),
	}
}

func (r Result) readyWord() string {
	if r.NotReady > 0 {
		return fmt.Sprintf("%d of %d NOT Ready after", r.NotReady, r.Devices)
	}
	return "all Ready"
}

func (r Result) restartLine(name string) string {
	if r.RestartErr != nil {
		return fmt.Sprintf("%-44s hub restarted: ERROR %v (peak RSS %d MB)", name, r.RestartErr, r.RestartPeakRSS>>20)
	}
	return fmt.Sprintf("%-44s hub restarted: every device's watches back after %v (new hub answering after %v; half the devices back after %v, 90 %% after %v), peak RSS %d MB  (target ≤ 60 s)",
		name, r.Reconnected.Round(100*time.Millisecond), r.HubBack.Round(100*time.Millisecond),
		r.BackP50.Round(100*time.Millisecond), r.BackP90.Round(100*time.Millisecond), r.RestartPeakRSS>>20)
}

// Run measures a fleet of devices devices (ten per site) against the hub
// admin reaches, whose process is hubPID (0: no hub figures).
func Run(ctx context.Context, admin *rest.Config, hub Hub, devices int, dataDir string) (Result, error) {
	hubPID := hub.PID
	r := Result{Devices: devices, Sites: max(devices/10, 1)}
	cs, err := kubernetes.NewForConfig(admin)
	if err != nil {
		return r, err
	}
	start := time.Now()
	f, err := Start(ctx, Options{Admin: admin, Devices: devices, Sites: r.Sites, DataDir: dataDir, Prefix: fmt.Sprintf("sim%d", devices)})
	if err != nil {
		return r, err
	}
	defer f.Stop()
	if err := f.WaitWatching(ctx); err != nil {
		return r, err
	}
	r.Joined = time.Since(start)

	// Steady state: two Lease rounds.
	time.Sleep(5 * time.Second)
	hub0, self0, t0 := procstat.CPUSeconds(hubPID), procstat.CPUSeconds(os.Getpid()), time.Now()
	time.Sleep(20 * time.Second)
	el := time.Since(t0).Seconds()
	r.HubCores, r.SimCores = (procstat.CPUSeconds(hubPID)-hub0)/el, (procstat.CPUSeconds(os.Getpid())-self0)/el
	r.HubRSS, r.SimRSS = procstat.RSS(hubPID), procstat.RSS(os.Getpid())

	ns := fmt.Sprintf("fleetsim-%d", devices)
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		return r, err
	}

	sel := map[string]string{"app": "fleetsim"}
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "fleetsim", Namespace: ns},
		Spec: appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: sel}, Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: sel},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app",
				Image: "registry.example/fleetsim@sha256:" + strings.Repeat("1", 64)}}},
		}}}
	bound, stopWatch, err := watchBindings(ctx, cs, ns)
	if err != nil {
		return r, err
	}
	defer stopWatch()
	created := time.Now()
	if _, err := cs.AppsV1().DaemonSets(ns).Create(ctx, ds, metav1.CreateOptions{}); err != nil {
		return r, err
	}
	defer func() {
		_ = cs.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{})
	}()
	for {
		d, err := cs.AppsV1().DaemonSets(ns).Get(ctx, "fleetsim", metav1.GetOptions{})
		if err == nil && int(d.Status.NumberReady) == devices {
			r.Ready = time.Since(created)
			break
		}
		if err == nil && time.Since(created) > 10*time.Minute {
			// The figures are of the pods that came; the line says how
			// many did not.
			r.Ready, r.NotReady = time.Since(created), devices-int(d.Status.NumberReady)
			break
		}
		select {
		case <-ctx.Done():
			return r, fmt.Errorf("the DaemonSet's pods: %w", ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
	r.HubPeakRSS = procstat.RSS(hubPID)
	pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return r, err
	}
	uidOn := map[string]types.UID{}
	for _, p := range pods.Items {
		uidOn[p.Spec.NodeName] = p.UID
	}
	stopWatch()
	var lat, fan, bnd, made []time.Duration
	for _, d := range f.Devices() {
		uid := uidOn[d.Name()]
		at, ok := d.SawPod(uid)
		if !ok {
			if r.NotReady == 0 {
				return r, fmt.Errorf("device %s never saw its pod", d.Name())
			}
			continue
		}
		lat = append(lat, at.Sub(created))
		if b, ok := bound.at(uid); ok {
			fan = append(fan, max(at.Sub(b), 0))
			bnd = append(bnd, b.Sub(created))
		}
		if m, ok := bound.createdAt(uid); ok {
			made = append(made, m.Sub(created))
		}
	}
	r.EventP50, r.EventP99 = percentile(lat, 50), percentile(lat, 99)
	r.FanoutP50, r.FanoutP99 = percentile(fan, 50), percentile(fan, 99)
	r.BoundP50, r.BoundP99 = percentile(bnd, 50), percentile(bnd, 99)
	r.MadeP50, r.MadeP99 = percentile(made, 50), percentile(made, 99)
	// A user's reads and writes with a pod per device in the store.
	if r.ListP99, r.ApplyP99, err = userOps(ctx, cs, ns); err != nil {
		return r, err
	}
	if hub.Restart != nil {
		// The figures so far stand even when the restart's do not come.
		st, err := restartStorm(ctx, hub.Restart, f, cs)
		r.Reconnected, r.RestartPeakRSS, r.RestartErr = st.all, st.peakRSS, err
		r.HubBack, r.BackP50, r.BackP90 = st.hubBack, percentile(st.back, 50), percentile(st.back, 90)
	}
	return r, nil
}

// userOps times 20 lists of every pod (as kubectl, in pages of 500) and
// 20 changes of one ConfigMap.
func userOps(ctx context.Context, cs kubernetes.Interface, ns string) (list, apply time.Duration, err error) {
	cm, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "user"}}, metav1.CreateOptions{})
	if err != nil {
		return 0, 0, err
	}
	var lists, applies []time.Duration
	for i := range 20 {
		t := time.Now()
		p := pager.New(func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return cs.CoreV1().Pods(metav1.NamespaceAll).List(ctx, o)
		})
		p.PageSize = 500
		if _, _, err := p.List(ctx, metav1.ListOptions{}); err != nil {
			return 0, 0, err
		}
		lists = append(lists, time.Since(t))
		t = time.Now()
		cm.Data = map[string]string{"n": strconv.Itoa(i)}
		if cm, err = cs.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
			return 0, 0, err
		}
		applies = append(applies, time.Since(t))
	}
	return percentile(lists, 99), percentile(applies, 99), nil
}

func percentile(d []time.Duration, p int) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[min(len(s)-1, len(s)*p/100)]
}

// bindings records when an admin's watch of every pod of a namespace saw
// each pod with a node.
type bindings struct {
	mu sync.Mutex
	t  map[types.UID]time.Time
	// created is when the watch first saw each pod (unbound).
	created map[types.UID]time.Time
}

func (b *bindings) createdAt(uid types.UID) (time.Time, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	t, ok := b.created[uid]
	return t, ok
}

func (b *bindings) at(uid types.UID) (time.Time, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	t, ok := b.t[uid]
	return t, ok
}

func watchBindings(ctx context.Context, cs kubernetes.Interface, ns string) (*bindings, func(), error) {
	w, err := cs.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, nil, err
	}
	b := &bindings{t: map[types.UID]time.Time{}, created: map[types.UID]time.Time{}}
	go func() {
		for ev := range w.ResultChan() {
			now := time.Now()
			p, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			b.mu.Lock()
			if _, seen := b.created[p.UID]; !seen {
				b.created[p.UID] = now
			}
			if _, seen := b.t[p.UID]; !seen && p.Spec.NodeName != "" {
				b.t[p.UID] = now
			}
			b.mu.Unlock()
		}
	}()
	var once sync.Once
	return b, func() { once.Do(w.Stop) }, nil
}

// restartStorm restarts the hub and waits until every device has all its
// watches open again on the new one, sampling the new hub's RSS. A device
// is back when each of its watches was opened again; or, since a watch
// on the multiplexed stream can resume on the new hub without its client
// seeing it end, when every device has its watches open and the new hub
// serves as many watches as the old one did.
func restartStorm(ctx context.Context, restart func(context.Context) (int, error), f *Fleet, admin kubernetes.Interface) (storm, error) {
	before := map[*Device]int64{}
	backAt := map[*Device]time.Duration{}
	for _, d := range f.Devices() {
		before[d] = d.Reconnects()
	}
	served, err := watchersServed(ctx, admin)
	if err != nil {
		// Without the count only the devices' own say-so counts.
		served = math.MaxInt
	}
	var lastAsked time.Time
	start := time.Now()
	// Devices come back while restart waits for the new hub to answer its
	// admin, which may be late: each is timed from the start.
	var mu sync.Mutex
	count := func() (back, open int) {
		mu.Lock()
		defer mu.Unlock()
		for _, d := range f.Devices() {
			if d.Watching() == Watches {
				open++
				if d.Reconnects() >= before[d]+Watches {
					back++
					if _, ok := backAt[d]; !ok {
						backAt[d] = time.Since(start)
					}
				}
			}
		}
		return back, open
	}
	restarting := make(chan struct{})
	go func() {
		for {
			select {
			case <-restarting:
				return
			case <-time.After(100 * time.Millisecond):
				count()
			}
		}
	}()
	pid, err := restart(ctx)
	close(restarting)
	if err != nil {
		return storm{}, fmt.Errorf("restarting the hub: %w", err)
	}
	st := storm{hubBack: time.Since(start)}
	done := func() storm {
		mu.Lock()
		defer mu.Unlock()
		st.all = time.Since(start)
		for _, d := range f.Devices() {
			at, ok := backAt[d]
			if !ok {
				at = st.all // back on the new hub unseen (above)
			}
			st.back = append(st.back, at)
		}
		return st
	}
	for {
		st.peakRSS = max(st.peakRSS, procstat.RSS(pid))
		back, open := count()
		if back == len(f.Devices()) {
			return done(), nil
		}
		if open == len(f.Devices()) && time.Since(lastAsked) >= time.Second {
			lastAsked = time.Now()
			if n, err := watchersServed(ctx, admin); err == nil && n >= served {
				return done(), nil
			}
		}
		if time.Since(start) > 5*time.Minute {
			// How far the others got says where they are stuck: no
			// watch at all (the connection, the stream) or some.
			byOpen := make([]int, Watches+1)
			var behind []string
			for _, d := range f.Devices() {
				byOpen[min(max(d.Watching(), 0), Watches)]++
				if n := d.Reconnects() - before[d]; n < Watches && len(behind) < 5 {
					behind = append(behind, fmt.Sprintf("%s opened %d of its watches again", d.name, n))
				}
			}
			return st, fmt.Errorf("%d of %d devices had their watches back 5 minutes after the hub restarted (devices by watches open, 0 to %d: %v; %s)",
				back, len(f.Devices()), Watches, byOpen, strings.Join(behind, ", "))
		}
		select {
		case <-ctx.Done():
			return st, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// storm is what restartStorm measured: when every device was back, the
// new hub's peak RSS, when the new hub answered and when each device was
// back, all from the restart's start.
type storm struct {
	all, hubBack time.Duration
	peakRSS      int64
	back         []time.Duration
}

// watchersServed is the number of watches the hub serves, by its metrics.
func watchersServed(ctx context.Context, admin kubernetes.Interface) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	b, err := admin.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return 0, err
	}
	n := 0
	for line := range strings.Lines(string(b)) {
		name, _, _ := strings.Cut(line, " ")
		if name, _, _ = strings.Cut(name, "{"); name != "flotilla_apiserver_watchers" {
			continue
		}
		fields := strings.Fields(line)
		v, err := strconv.ParseFloat(fields[len(fields)-1], 64)
		if err != nil {
			return 0, fmt.Errorf("the hub's metric %q: %w", strings.TrimSpace(line), err)
		}
		n += int(v)
	}
	return n, nil
}
