package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"flotilla.dev/flotilla/bench/hubapi"
	"flotilla.dev/flotilla/hub/controllers/manager"
	"flotilla.dev/flotilla/hub/store/etcdstore/etcdtest"
)

// etcdFigures measures hubs on etcd against one on bbolt, in one run:
// creates with 16 clients on each, the latency of an event written
// through one hub to a watch on another, and how long the controllers
// take to move to the other hub when the leading one is killed.
func etcdFigures(ctx context.Context) ([]string, error) {
	dir, err := os.MkdirTemp("", "flotilla-bench-etcd-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	members, err := etcdtest.Run(dir, 1)
	if err != nil {
		return nil, err
	}
	defer members[0].Stop()
	var lines []string

	const clients, n = 16, 8000
	bolt, err := startHub(ctx)
	if err != nil {
		return nil, err
	}
	boltRate, err := createRate(ctx, bolt, clients, n)
	bolt.stop()
	if err != nil {
		return nil, fmt.Errorf("bbolt hub: %w", err)
	}
	a, err := startHubWith(ctx, "", "--store", "etcd", "--etcd-endpoints", members[0].URL)
	if err != nil {
		return nil, err
	}
	defer a.stop()
	etcdRate, err := createRate(ctx, a, clients, n)
	if err != nil {
		return nil, fmt.Errorf("etcd hub: %w", err)
	}
	lines = append(lines, fmt.Sprintf("%-44s %8.0f creates/s on etcd, %.0f on bbolt  (one hub, %d clients, %d creates)", "hub creates, etcd vs bbolt", etcdRate, boltRate, clients, n))

	// The first hub leads (it was alone); a second joins.
	holder, err := leaseHolder(ctx, a)
	if err != nil {
		return nil, err
	}
	b, err := startHubWith(ctx, a.dir, "--store", "etcd", "--etcd-endpoints", members[0].URL)
	if err != nil {
		return nil, err
	}
	defer b.stop()
	p50, p99, err := crossHubLatency(ctx, a, b, 200)
	if err != nil {
		return nil, err
	}
	lines = append(lines, fmt.Sprintf("%-44s p50 %v  p99 %v  (written through one hub, watched through another, 200 events)", "watch event through etcd", p50.Round(100*time.Microsecond), p99.Round(100*time.Microsecond)))

	killed := time.Now()
	if err := a.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		return nil, err
	}
	for {
		h, err := leaseHolder(ctx, b)
		if err == nil && h != holder {
			break
		}
		if time.Since(killed) > time.Minute {
			return nil, errors.New("no hub took the controllers over within a minute of the leader's death")
		}
		time.Sleep(100 * time.Millisecond)
	}
	lines = append(lines, fmt.Sprintf("%-44s %v  (target ≤ 15 s; the leader killed with SIGKILL, 10 s lease)", "controllers fail over to another hub", time.Since(killed).Round(100*time.Millisecond)))
	return lines, nil
}

func createRate(ctx context.Context, h *hubProc, clients, n int) (float64, error) {
	ns, err := h.namespace(ctx, "bench-etcd-creates")
	if err != nil {
		return 0, err
	}
	r, err := hubapi.Creates(ctx, h.cfg, ns, clients, n)
	if err != nil {
		return 0, err
	}
	return r.PerSec, nil
}

// leaseHolder waits for the controller manager's Lease to be held and
// returns its holder.
func leaseHolder(ctx context.Context, h *hubProc) (string, error) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		l, err := h.cs.CoordinationV1().Leases("flotilla-system").Get(ctx, manager.LeaseName, metav1.GetOptions{})
		if err == nil && l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != "" {
			return *l.Spec.HolderIdentity, nil
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("the controllers' Lease is not held: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// crossHubLatency creates ConfigMaps one after another through a and
// times each until b's watch delivers it.
func crossHubLatency(ctx context.Context, a, b *hubProc, n int) (p50, p99 time.Duration, err error) {
	ns, err := a.namespace(ctx, "bench-etcd-watch")
	if err != nil {
		return 0, 0, err
	}
	w, err := b.cs.CoreV1().ConfigMaps(ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, 0, err
	}
	defer w.Stop()
	var ds []time.Duration
	for i := range n {
		start := time.Now()
		name := fmt.Sprintf("cm-%d", i)
		if _, err := a.cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			return 0, 0, err
		}
		for seen := false; !seen; {
			select {
			case ev, ok := <-w.ResultChan():
				if !ok {
					return 0, 0, errors.New("the watch on the second hub ended")
				}
				if cm, isCM := ev.Object.(*corev1.ConfigMap); isCM && ev.Type == watch.Added && cm.Name == name {
					seen = true
				}
			case <-time.After(30 * time.Second):
				return 0, 0, fmt.Errorf("%s never reached the second hub's watch", name)
			}
		}
		ds = append(ds, time.Since(start))
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	return ds[len(ds)/2], ds[len(ds)*99/100], nil
}
