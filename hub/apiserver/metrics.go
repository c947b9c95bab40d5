package apiserver

import (
	"github.com/prometheus/client_golang/prometheus"

	"flotilla.dev/flotilla/api/agentapi"
)

type metrics struct {
	requests        *prometheus.CounterVec
	latency         *prometheus.HistogramVec
	watchers        prometheus.GaugeFunc
	watchersDropped prometheus.Counter
	cacheRevision   prometheus.GaugeFunc
	watchEvents     prometheus.Counter
	eventsExpired   prometheus.Counter
	usageReports    prometheus.Counter
	usageBytes      prometheus.Counter
	tunnels         prometheus.GaugeFunc
}

func newMetrics(reg prometheus.Registerer, c func() *watchCache, tunnels func() int) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "flotilla_apiserver_requests_total",
			Help: "API requests by verb, resource, subresource and HTTP code.",
		}, []string{"verb", "resource", "subresource", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "flotilla_apiserver_request_duration_seconds",
			Help:    "API request latency by verb and resource (watches excluded).",
			Buckets: []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10},
		}, []string{"verb", "resource"}),
		watchersDropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "flotilla_apiserver_watchers_dropped_total",
			Help: "Watchers closed because they fell behind.",
		}),
		watchEvents: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "flotilla_apiserver_watch_events_sent_total",
			Help: "Watch events written to clients.",
		}),
		eventsExpired: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "flotilla_apiserver_events_expired_total",
			Help: "Events deleted for being older than the event TTL or past their object's share.",
		}),
		usageReports: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "flotilla_apiserver_usage_reports_total",
			Help: "Usage reports stored from devices (one store write each).",
		}),
		usageBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "flotilla_apiserver_usage_report_bytes_total",
			Help: "Bytes of the usage reports stored from devices, as they sent them.",
		}),
	}
	m.watchers = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "flotilla_apiserver_watchers",
		Help: "Open watches.",
	}, func() float64 { return float64(c().watcherCount()) })
	m.cacheRevision = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "flotilla_apiserver_cache_revision",
		Help: "The store revision the watch cache has reached.",
	}, func() float64 { return float64(c().revision()) })
	m.tunnels = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "flotilla_apiserver_tunnels",
		Help: "Open device tunnels (" + agentapi.PathTunnel + ").",
	}, func() float64 { return float64(tunnels()) })
	if reg != nil {
		reg.MustRegister(m.requests, m.latency, m.watchers, m.watchersDropped, m.cacheRevision, m.watchEvents, m.eventsExpired, m.usageReports, m.usageBytes, m.tunnels)
	}
	return m
}
