package boltstore

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are registered with Options.Registerer. A nil *metrics (no
// registerer) records nothing.
type metrics struct {
	reg        prometheus.Registerer
	commit     prometheus.Histogram
	batch      prometheus.Histogram
	checkpoint prometheus.Histogram
	pending    prometheus.GaugeFunc
	revision   prometheus.GaugeFunc
	compacted  prometheus.GaugeFunc
	watchers   prometheus.Gauge
	collectors []prometheus.Collector
}

func newMetrics(reg prometheus.Registerer, s *Store) (*metrics, error) {
	m := &metrics{
		reg: reg,
		commit: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "flotilla_store_commit_duration_seconds",
			Help: "Time to append one group commit to the hub store's log and fsync it: what a write waits for.",
			// From a fast NVMe fsync to a struggling SD card.
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}),
		batch: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "flotilla_store_commit_batch_size",
			Help:    "Writes that shared one commit of the hub store.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 11),
		}),
		checkpoint: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "flotilla_store_checkpoint_duration_seconds",
			Help:    "Time to commit (and fsync) one checkpoint of the hub store's log into its bbolt file.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 15),
		}),
		pending: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "flotilla_store_pending_bytes",
			Help: "About how many bytes of acknowledged writes the hub store holds in memory until its next checkpoint.",
		}, func() float64 { return float64(s.ov.bytes.Load()) }),
		revision: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "flotilla_store_revision",
			Help: "Current revision of the hub store.",
		}, func() float64 { return float64(s.ov.current()) }),
		compacted: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "flotilla_store_compacted_revision",
			Help: "Oldest revision the hub store can still watch or list from.",
		}, func() float64 { return float64(s.compacted.Load()) }),
		watchers: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "flotilla_store_watchers",
			Help: "Live watches on the hub store.",
		}),
	}
	for _, c := range []prometheus.Collector{m.commit, m.batch, m.checkpoint, m.pending, m.revision, m.compacted, m.watchers} {
		if err := reg.Register(c); err != nil {
			m.unregister()
			return nil, err
		}
		m.collectors = append(m.collectors, c)
	}
	s.hub.gauge = m.watchers.Add
	return m, nil
}

func (m *metrics) observeCommit(d time.Duration, writes int) {
	if m == nil {
		return
	}
	m.commit.Observe(d.Seconds())
	m.batch.Observe(float64(writes))
}

func (m *metrics) observeCheckpoint(d time.Duration) {
	if m == nil {
		return
	}
	m.checkpoint.Observe(d.Seconds())
}

// unregister lets a store reopened in the same process register again.
func (m *metrics) unregister() {
	if m == nil {
		return
	}
	for _, c := range m.collectors {
		m.reg.Unregister(c)
	}
	m.collectors = nil
}
