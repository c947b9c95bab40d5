package boltstore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"flotilla.dev/flotilla/hub/store/boltstore"
)

func cpuNow() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkPacedUpdates: updates of 2,000 keys (10,000 with busy) arriving at random at a
// steady rate from independent writers, as a fleet's Lease renewals do
// (200/s: 2,000 devices, 1,000/s: 10,000), with the process's CPU per
// write and the writes per commit; with sequential=true, one more writer
// writes back to back meanwhile, as a controller working through its
// queue does, and its writes per second are reported.
func BenchmarkPacedUpdates(b *testing.B) {
	for _, tc := range []struct {
		rate int
		seq  bool
		busy int
		keys int
	}{{200, false, 0, 2000}, {1000, false, 0, 2000}, {200, true, 0, 2000}, {1000, false, 200, 10_000}} {
		rate, keys := tc.rate, tc.keys
		b.Run(fmt.Sprintf("rate=%d/sequential=%v/busy=%d", rate, tc.seq, tc.busy), func(b *testing.B) {
			reg := prometheus.NewRegistry()
			s, err := boltstore.Open(filepath.Join(b.TempDir(), "state.db"), boltstore.Options{Registerer: reg})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			ctx := context.Background()
			val := make([]byte, 600)
			for i := range keys {
				if _, err := s.Create(ctx, fmt.Sprintf("/leases/kube-node-lease/d-%05d", i), val); err != nil {
					b.Fatal(err)
				}
			}
			c0, _ := histogram(b, reg, "flotilla_store_commit_duration_seconds")
			lat := make([]time.Duration, b.N)
			var wg sync.WaitGroup
			// One writer writing back to back meanwhile, as a controller
			// working through a queue does.
			done := make(chan struct{})
			seq := make(chan int)
			go func() {
				n := 0
				for tc.seq {
					select {
					case <-done:
						seq <- n
						return
					default:
					}
					if _, err := s.Update(ctx, "/leases/kube-node-lease/d-00000", val, 0); err != nil {
						b.Error(err)
					}
					n++
				}
				<-done
				seq <- n
			}()
			for range tc.busy {
				go spin(done)
			}
			cpu0 := cpuNow()
			b.ResetTimer()
			start := time.Now()
			next := start
			for i := 0; i < b.N; i++ {
				next = next.Add(time.Duration(rand.ExpFloat64() * float64(time.Second) / float64(rate)))
				time.Sleep(time.Until(next))
				wg.Add(1)
				go func() {
					defer wg.Done()
					t0 := time.Now()
					if _, err := s.Update(ctx, fmt.Sprintf("/leases/kube-node-lease/d-%05d", rand.IntN(keys)), val, 0); err != nil {
						b.Error(err)
					}
					lat[i] = time.Since(t0)
				}()
			}
			wg.Wait()
			b.StopTimer()
			el := time.Since(start)
			close(done)
			seqN := <-seq
			cpu := cpuNow() - cpu0
			writes := float64(b.N + seqN)
			if tc.seq {
				b.ReportMetric(float64(seqN)/el.Seconds(), "seq-writes/s")
			}
			if tc.busy == 0 {
				b.ReportMetric(float64(cpu.Microseconds())/writes, "cpu-µs/write")
			}
			reportPercentiles(b, lat, "")
			if count, _ := histogram(b, reg, "flotilla_store_commit_duration_seconds"); count > c0 {
				b.ReportMetric(writes/(count-c0), "writes/commit")
			}
		})
	}
}

// spin keeps a CPU busy until done is closed, checking it now and then.
func spin(done <-chan struct{}) {
	x := uint64(1)
	for {
		for range 100_000 {
			x = x*6364136223846793005 + 1442695040888963407
		}
		select {
		case <-done:
			sink.Add(x)
			return
		default:
		}
	}
}

var sink atomic.Uint64
