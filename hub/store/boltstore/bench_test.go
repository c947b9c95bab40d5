package boltstore_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"flotilla.dev/flotilla/hub/store/boltstore"
)

// A value about the size of a small pod object in JSON.
var benchValue = make([]byte, 1500)

// BenchmarkCreate measures creates per second and their latency with 1 and
// 16 concurrent writers, each create acknowledged only after its commit's
// fsync.
func BenchmarkCreate(b *testing.B) {
	for _, writers := range []int{1, 16} {
		b.Run(fmt.Sprintf("writers=%d", writers), func(b *testing.B) {
			reg := prometheus.NewRegistry()
			s, err := boltstore.Open(filepath.Join(b.TempDir(), "state.db"), boltstore.Options{Registerer: reg})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			lat := make([]time.Duration, b.N)
			var next atomic.Int64
			var wg sync.WaitGroup
			b.ResetTimer()
			start := time.Now()
			for range writers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						i := next.Add(1) - 1
						if i >= int64(b.N) {
							return
						}
						t0 := time.Now()
						if _, err := s.Create(context.Background(), fmt.Sprintf("/pods/default/p-%09d", i), benchValue); err != nil {
							b.Error(err)
							return
						}
						lat[i] = time.Since(t0)
					}
				}()
			}
			wg.Wait()
			elapsed := time.Since(start)
			b.StopTimer()
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "creates/s")
			reportPercentiles(b, lat, "")
			// How the group commit behaved: writes per commit and the mean
			// commit (fsync) time.
			if count, sum := histogram(b, reg, "flotilla_store_commit_duration_seconds"); count > 0 {
				b.ReportMetric(float64(b.N)/count, "writes/commit")
				b.ReportMetric(sum/count*1000, "commit-ms")
			}
		})
	}
}

// BenchmarkWatchFanout measures, for one write seen by many watchers of
// the same prefix, how long until each watcher has it (p50, p99) and until
// the last one has it.
func BenchmarkWatchFanout(b *testing.B) {
	for _, watchers := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("watchers=%d", watchers), func(b *testing.B) {
			s, err := boltstore.Open(filepath.Join(b.TempDir(), "state.db"), boltstore.Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var writeStart atomic.Int64
			got := make(chan time.Duration, watchers)
			for range watchers {
				ch, err := s.Watch(ctx, "/pods/", 0)
				if err != nil {
					b.Fatal(err)
				}
				go func() {
					for r := range ch {
						if r.Err != nil {
							b.Error(r.Err)
							return
						}
						for range r.Events {
							got <- time.Duration(time.Now().UnixNano() - writeStart.Load())
						}
					}
				}()
			}
			var perWatcher, all []time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				writeStart.Store(time.Now().UnixNano())
				if _, err := s.Create(ctx, fmt.Sprintf("/pods/default/f-%d", i), benchValue); err != nil {
					b.Fatal(err)
				}
				var last time.Duration
				for range watchers {
					d := <-got
					perWatcher = append(perWatcher, d)
					last = max(last, d)
				}
				all = append(all, last)
			}
			b.StopTimer()
			reportPercentiles(b, perWatcher, "")
			reportPercentiles(b, all, "all-")
		})
	}
}

func reportPercentiles(b *testing.B, d []time.Duration, prefix string) {
	if len(d) == 0 {
		return
	}
	slices.Sort(d)
	pct := func(p float64) float64 {
		return float64(d[min(len(d)-1, int(p*float64(len(d))))].Microseconds()) / 1000
	}
	b.ReportMetric(pct(0.50), prefix+"p50-ms")
	b.ReportMetric(pct(0.99), prefix+"p99-ms")
}

func histogram(b *testing.B, reg *prometheus.Registry, name string) (count, sum float64) {
	mfs, err := reg.Gather()
	if err != nil {
		b.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			h := mf.GetMetric()[0].GetHistogram()
			return float64(h.GetSampleCount()), h.GetSampleSum()
		}
	}
	return 0, 0
}
