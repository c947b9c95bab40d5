package proxybench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"

	"flotilla.dev/flotilla/agent/hubclient"
	"flotilla.dev/flotilla/agent/hubclient/fromclientset"
	"flotilla.dev/flotilla/agent/proxy"
	"flotilla.dev/flotilla/agent/proxy/netnstest"
	"flotilla.dev/flotilla/bench/iptrules"
)

// Options shape a run; zero values take the figures.
type Options struct {
	// Services are the sizes to fully sync (100, 1,000, 5,000).
	Services []int
	// Endpoints per service (3).
	Endpoints int
	// PerRuleMax is the largest size also written one iptables call per
	// rule (1,000: at 5,000 services that is ~60,000 process starts).
	PerRuleMax int
	// Changes is how many single-endpoint changes are timed at the
	// largest size (5); the median is reported.
	Changes int
	// Mode forces an iptables variant (proxy.ModeNFT, proxy.ModeLegacy).
	Mode string
}

// Figure is one size's measurements.
type Figure struct {
	Services, Endpoints int
	// Chains and Rules written by the full sync.
	Chains, Rules int
	// FullSync is one full sync from empty tables: reading the caches,
	// rendering, reading the kernel's tables back, one iptables-restore.
	FullSync time.Duration
	// PerRule writes the same chains and rules with one iptables command
	// each (zero when not measured); Ratio = PerRule / FullSync.
	PerRule      time.Duration
	PerRuleCalls int
	Ratio        float64
}

// Results of a run.
type Results struct {
	Mode    string
	Figures []Figure
	// OneChange is the median sync after one endpoint of one service
	// changed, at the largest size; OneChangeChains the chains it wrote
	// or deleted.
	OneChange        time.Duration
	OneChangeRestore time.Duration
	OneChangeAt      int
	OneChangeChains  int
}

func (o Options) withDefaults() Options {
	if len(o.Services) == 0 {
		o.Services = []int{100, 1000, 5000}
	}
	if o.Endpoints == 0 {
		o.Endpoints = 3
	}
	if o.PerRuleMax == 0 {
		o.PerRuleMax = 1000
	}
	if o.Changes == 0 {
		o.Changes = 5
	}
	return o
}

// Run measures; it needs root and the iptables commands.
func Run(ctx context.Context, o Options) (Results, error) {
	o = o.withDefaults()
	if os.Geteuid() != 0 {
		return Results{}, errors.New("the proxy benchmark needs root (it creates a network namespace)")
	}
	var res Results
	sizes := append([]int(nil), o.Services...)
	sort.Ints(sizes)
	for i, n := range sizes {
		last := i == len(sizes)-1
		f, err := measure(ctx, o, n, last, &res)
		if err != nil {
			return res, fmt.Errorf("%d services: %w", n, err)
		}
		res.Figures = append(res.Figures, f)
	}
	return res, nil
}

func objects(n, endpoints int) []runtime.Object {
	out := make([]runtime.Object, 0, 2*n)
	for i := range n {
		name := fmt.Sprintf("svc-%05d", i)
		ip := fmt.Sprintf("10.43.%d.%d", i/250, 1+i%250)
		out = append(out, &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: "bench", Name: name},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: ip,
				Ports: []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}}},
		})
		out = append(out, slice(name, i, endpoints, 0))
	}
	return out
}

// slice is service i's endpoints; generation shifts the last one, which is
// what an endpoint change looks like.
func slice(name string, i, endpoints, generation int) *discoveryv1.EndpointSlice {
	sl := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: "bench", Name: name + "-abcde", ResourceVersion: fmt.Sprint(generation + 1), Labels: map[string]string{discoveryv1.LabelServiceName: name}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr("http"), Protocol: ptr(corev1.ProtocolTCP), Port: ptr(int32(8080))}},
	}
	for e := range endpoints {
		host := 1 + (i*endpoints+e)%250
		if e == endpoints-1 {
			host = 1 + (host+generation)%250
		}
		sl.Endpoints = append(sl.Endpoints, discoveryv1.Endpoint{
			Addresses:  []string{fmt.Sprintf("10.42.%d.%d", (i*endpoints+e)/250%250, host)},
			NodeName:   ptr(fmt.Sprintf("device-%d", e)),
			Conditions: discoveryv1.EndpointConditions{Ready: ptr(true)},
		})
	}
	return sl
}

func ptr[T any](v T) *T { return &v }

func measure(ctx context.Context, o Options, n int, last bool, res *Results) (Figure, error) {
	f := Figure{Services: n, Endpoints: o.Endpoints}
	ns, err := netnstest.Create("flt-bench")
	if err != nil {
		return f, err
	}
	defer ns.Delete()

	client := fake.NewClientset(objects(n, o.Endpoints)...)
	factory := hubclient.NewInformers(fromclientset.New(client))
	var sys *proxy.SystemIPTables
	if err := ns.Do(func() error { var err error; sys, err = proxy.System(o.Mode); return err }); err != nil {
		return f, err
	}
	res.Mode = sys.Mode()
	p, err := proxy.New(proxy.Config{NodeName: "device-0", Informers: factory, IPTables: sys,
		Conntrack: noConntrack{}, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return f, err
	}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	factory.Start(cctx.Done())
	if !factory.WaitForCacheSync(cctx.Done()) {
		return f, errors.New("the informers did not sync")
	}

	var sr proxy.SyncResult
	if err := ns.Do(func() error { sr = p.Sync(ctx, true); return sr.Err }); err != nil {
		return f, err
	}
	f.FullSync, f.Chains = sr.Duration, sr.ChainsWritten

	saved, err := ns.Exec(ctx, "iptables-save")
	if err != nil {
		return f, err
	}
	cmds, rules := perRuleCommands(saved)
	f.Rules = rules

	if last {
		var times, restores []time.Duration
		lister := factory.EndpointSlices().Lister
		for g := 1; g <= o.Changes; g++ {
			sl := slice(fmt.Sprintf("svc-%05d", n/2), n/2, o.Endpoints, g)
			if _, err := client.DiscoveryV1().EndpointSlices("bench").Update(ctx, sl, metav1.UpdateOptions{}); err != nil {
				return f, err
			}
			for {
				got, err := lister.EndpointSlices("bench").Get(sl.Name)
				if err == nil && got.ResourceVersion == sl.ResourceVersion {
					break
				}
				time.Sleep(time.Millisecond)
			}
			if err := ns.Do(func() error { sr = p.Sync(ctx, false); return sr.Err }); err != nil {
				return f, err
			}
			times = append(times, sr.Duration)
			restores = append(restores, sr.Restore)
			res.OneChangeChains = sr.ChainsWritten + sr.ChainsDeleted
		}
		slices.Sort(times)
		slices.Sort(restores)
		res.OneChange, res.OneChangeRestore, res.OneChangeAt = times[len(times)/2], restores[len(restores)/2], n
	}

	if n <= o.PerRuleMax {
		if err := ns.Do(func() error { return proxy.CleanupWith(ctx, sys) }); err != nil {
			return f, err
		}
		bin := "iptables-nft"
		if sys.Mode() == proxy.ModeLegacy {
			bin = "iptables-legacy"
		}
		start := time.Now()
		err := ns.Do(func() error {
			for _, c := range cmds {
				if out, err := exec.CommandContext(ctx, bin, c...).CombinedOutput(); err != nil {
					return fmt.Errorf("%s %s: %w: %s", bin, strings.Join(c, " "), err, out)
				}
			}
			return nil
		})
		if err != nil {
			return f, err
		}
		f.PerRule, f.PerRuleCalls = time.Since(start), len(cmds)
		f.Ratio = float64(f.PerRule) / float64(f.FullSync)
	}
	return f, nil
}

type noConntrack struct{}

func (noConntrack) ClearUDP(context.Context, proxy.FlowFilter) error { return nil }

// perRuleCommands turns the FLOTILLA part of iptables-save output into
// iptables command lines: one -N per chain, one -A per rule (jumps into
// the base chains included), in an order that creates chains before they
// are referenced.
func perRuleCommands(saved []byte) ([][]string, int) {
	var chains, rules [][]string
	table := ""
	for _, l := range strings.Split(string(saved), "\n") {
		switch {
		case strings.HasPrefix(l, "*"):
			table = l[1:]
		case strings.HasPrefix(l, ":FLOTILLA-"):
			name, _, _ := strings.Cut(l[1:], " ")
			chains = append(chains, []string{"-w", "-t", table, "-N", name})
		case strings.HasPrefix(l, "-A ") && strings.Contains(l, "FLOTILLA-"):
			rules = append(rules, append([]string{"-w", "-t", table}, iptrules.Split(l)...))
		}
	}
	return append(chains, rules...), len(rules)
}

// Lines renders the results one figure a line, beside the targets.
func (r Results) Lines() []string {
	var out []string
	for _, f := range r.Figures {
		l := fmt.Sprintf("%-44s %8v  %d chains, %d rules, one iptables-restore", fmt.Sprintf("proxy full sync, %d services × %d (%s)", f.Services, f.Endpoints, r.Mode),
			f.FullSync.Round(100*time.Microsecond), f.Chains, f.Rules)
		if f.PerRule > 0 {
			l += fmt.Sprintf("; one call per rule %v (%d calls), %.0f× slower", f.PerRule.Round(time.Millisecond), f.PerRuleCalls, f.Ratio)
		}
		if f.Services == 1000 {
			l += "  (target ≤ 1 s)"
		}
		out = append(out, l)
	}
	if r.OneChangeAt > 0 {
		out = append(out, fmt.Sprintf("%-44s %8v  %d chains rewritten/deleted, %v of it in iptables-restore  (target ≤ 100 ms)",
			fmt.Sprintf("proxy one endpoint change at %d services", r.OneChangeAt), r.OneChange.Round(100*time.Microsecond), r.OneChangeChains, r.OneChangeRestore.Round(100*time.Microsecond)))
	}
	return out
}
