package hrlscore

import (
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"

	"github.com/hrl-scheduler/hrl-scheduler/scheduler-plugin/pkg/scoretable"
)

// pluginMetrics are the plugin's metrics, on kube-scheduler's /metrics (the legacy registry), registered once per
// process. Names follow the extender's (hrl_extender_*) with the plugin's prefix; base units.
type pluginMetrics struct {
	prescore      map[string]metrics.CounterMetric
	unknownNodes  metrics.CounterMetric
	updates       *metrics.CounterVec
	watchErrors   *metrics.CounterVec
	decode        *metrics.Histogram
	connected     *metrics.Gauge
	generation    *metrics.Gauge
	rows          *metrics.Gauge
	nodes         *metrics.Gauge
	tableComputed *metrics.Gauge
	age           atomic.Pointer[func() float64]
}

var (
	metricsOnce sync.Once
	theMetrics  *pluginMetrics
)

func registerMetrics() *pluginMetrics {
	metricsOnce.Do(func() {
		m := &pluginMetrics{prescore: map[string]metrics.CounterMetric{}}
		prescore := metrics.NewCounterVec(&metrics.CounterOpts{
			Name:           "hrl_plugin_prescore_total",
			Help:           "Scheduling cycles of the HRLScore plugin by outcome: ok, or neutral_* (every node scored the same).",
			StabilityLevel: metrics.ALPHA,
		}, []string{"outcome"})
		unknown := metrics.NewCounter(&metrics.CounterOpts{
			Name:           "hrl_plugin_unknown_nodes_total",
			Help:           "Feasible nodes the score table does not list (scored 0).",
			StabilityLevel: metrics.ALPHA,
		})
		m.updates = metrics.NewCounterVec(&metrics.CounterOpts{
			Name:           "hrl_plugin_table_updates_total",
			Help:           "Messages of the score-table watch by kind: table (a new table), heartbeat.",
			StabilityLevel: metrics.ALPHA,
		}, []string{"kind"})
		m.watchErrors = metrics.NewCounterVec(&metrics.CounterOpts{
			Name:           "hrl_plugin_watch_errors_total",
			Help:           "Score-table watch failures by kind: stream (broke or could not open; reopened), invalid (a table refused).",
			StabilityLevel: metrics.ALPHA,
		}, []string{"kind"})
		m.decode = metrics.NewHistogram(&metrics.HistogramOpts{
			Name:           "hrl_plugin_table_decode_duration_seconds",
			Help:           "Time to check and decode one score table, seconds.",
			Buckets:        []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25},
			StabilityLevel: metrics.ALPHA,
		})
		m.connected = metrics.NewGauge(&metrics.GaugeOpts{
			Name: "hrl_plugin_watch_connected", Help: "1 while the score-table watch stream is open, else 0.",
			StabilityLevel: metrics.ALPHA,
		})
		m.generation = metrics.NewGauge(&metrics.GaugeOpts{
			Name: "hrl_plugin_table_generation", Help: "The producer's generation of the current score table (0: none).",
			StabilityLevel: metrics.ALPHA,
		})
		m.rows = metrics.NewGauge(&metrics.GaugeOpts{
			Name: "hrl_plugin_table_rows", Help: "(service, requests) rows of the current score table.",
			StabilityLevel: metrics.ALPHA,
		})
		m.nodes = metrics.NewGauge(&metrics.GaugeOpts{
			Name: "hrl_plugin_table_nodes", Help: "Nodes of the current score table.", StabilityLevel: metrics.ALPHA,
		})
		m.tableComputed = metrics.NewGauge(&metrics.GaugeOpts{
			Name:           "hrl_plugin_table_computed_timestamp_seconds",
			Help:           "When the producer computed the current score table, unix seconds (its clock).",
			StabilityLevel: metrics.ALPHA,
		})
		legacyregistry.MustRegister(prescore, unknown, m.updates, m.watchErrors, m.decode, m.connected, m.generation,
			m.rows, m.nodes, m.tableComputed)
		legacyregistry.CustomMustRegister(&ageCollector{m: m})
		for _, o := range scoretable.Outcomes {
			m.prescore[o] = prescore.WithLabelValues(o)
		}
		m.unknownNodes = unknown
		for _, k := range []string{"table", "heartbeat"} {
			m.updates.WithLabelValues(k)
		}
		for _, k := range []string{"stream", "invalid"} {
			m.watchErrors.WithLabelValues(k)
		}
		theMetrics = m
	})
	return theMetrics
}

var ageDesc = metrics.NewDesc("hrl_plugin_table_age_seconds",
	"Age of the current score table's cluster snapshot, seconds; -1 without a table.", nil, nil, metrics.ALPHA, "")

// ageCollector reports the table's age when scraped (it grows between messages).
type ageCollector struct {
	metrics.BaseStableCollector
	m *pluginMetrics
}

func (c *ageCollector) DescribeWithStability(ch chan<- *metrics.Desc) { ch <- ageDesc }

func (c *ageCollector) CollectWithStability(ch chan<- metrics.Metric) {
	v := -1.0
	if f := c.m.age.Load(); f != nil {
		v = (*f)()
	}
	ch <- metrics.NewLazyConstMetric(ageDesc, metrics.GaugeValue, v)
}

func (m *pluginMetrics) bindAge(f func() float64) { m.age.Store(&f) }

func (m *pluginMetrics) cycle(outcome string) { m.prescore[outcome].Inc() }

func (m *pluginMetrics) unknownNode() { m.unknownNodes.Inc() }

// The scoretable.WatchEvents of the watch.

func (m *pluginMetrics) Connected(up bool) {
	if up {
		m.connected.Set(1)
	} else {
		m.connected.Set(0)
	}
}

func (m *pluginMetrics) Table(t *scoretable.Table, decode time.Duration) {
	m.updates.WithLabelValues("table").Inc()
	m.decode.Observe(decode.Seconds())
	m.generation.Set(float64(t.Generation))
	m.rows.Set(float64(t.Rows()))
	m.nodes.Set(float64(len(t.Nodes)))
	m.tableComputed.Set(t.ComputedAtS)
}

func (m *pluginMetrics) Heartbeat() { m.updates.WithLabelValues("heartbeat").Inc() }

func (m *pluginMetrics) Error(kind string) { m.watchErrors.WithLabelValues(kind).Inc() }
