package handshake

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

const (
	resultDone    = "done"
	resultFailed  = "failed"
	resultDropped = "dropped"
)

// metrics are registered with Options.Registerer; a nil *metrics records
// nothing.
type metrics struct {
	reg        prometheus.Registerer
	handshakes *prometheus.CounterVec
	wait       prometheus.Histogram
	took       prometheus.Histogram
	collectors []prometheus.Collector
}

func newMetrics(reg prometheus.Registerer, l *Listener) (*metrics, error) {
	m := &metrics{
		reg: reg,
		handshakes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "flotilla_tls_handshakes_total",
			Help: "TLS handshakes of the hub's listener by result: done, failed, or dropped (the connection waited too long for its turn, or too many waited).",
		}, []string{"result"}),
		wait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "flotilla_tls_handshake_wait_seconds",
			Help:    "Time an accepted connection waited for its TLS handshake to begin.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 8),
		}),
		took: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "flotilla_tls_handshake_duration_seconds",
			Help:    "Time a TLS handshake of the hub's listener took, from its start to its end (failed ones included); mostly its client's round trips and CPU.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 8),
		}),
	}
	waitingNow := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "flotilla_tls_handshakes_waiting",
		Help: "Accepted connections waiting for their TLS handshake.",
	}, func() float64 { return float64(l.waiting()) })
	for _, c := range []prometheus.Collector{m.handshakes, m.wait, m.took, waitingNow} {
		if err := reg.Register(c); err != nil {
			m.unregister()
			return nil, err
		}
		m.collectors = append(m.collectors, c)
	}
	for _, r := range []string{resultDone, resultFailed, resultDropped} {
		m.handshakes.WithLabelValues(r)
	}
	return m, nil
}

func (m *metrics) observe(result string) {
	if m != nil {
		m.handshakes.WithLabelValues(result).Inc()
	}
}

func (m *metrics) observeWait(d time.Duration) {
	if m != nil {
		m.wait.Observe(d.Seconds())
	}
}

func (m *metrics) observeHandshake(d time.Duration) {
	if m != nil {
		m.took.Observe(d.Seconds())
	}
}

// unregister lets a listener made again in the same process register.
func (m *metrics) unregister() {
	if m == nil {
		return
	}
	for _, c := range m.collectors {
		m.reg.Unregister(c)
	}
	m.collectors = nil
}
