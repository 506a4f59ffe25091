package server

import (
	"context"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/klog/v2"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// The resource metrics the kubelet serves on /metrics/resource, which
// metrics-server scrapes: names, labels and help as the kubelet's, with
// the stability level its metrics framework writes into the help.
var (
	nodeCPUUsageDesc = prometheus.NewDesc("node_cpu_usage_seconds_total",
		"[STABLE] Cumulative cpu time consumed by the node in core-seconds", nil, nil)
	nodeMemoryUsageDesc = prometheus.NewDesc("node_memory_working_set_bytes",
		"[STABLE] Current working set of the node in bytes", nil, nil)
	nodeSwapUsageDesc = prometheus.NewDesc("node_swap_usage_bytes",
		"[ALPHA] Current swap usage of the node in bytes. Reported only on non-windows systems", nil, nil)
	containerCPUUsageDesc = prometheus.NewDesc("container_cpu_usage_seconds_total",
		"[STABLE] Cumulative cpu time consumed by the container in core-seconds", []string{"container", "pod", "namespace"}, nil)
	containerMemoryUsageDesc = prometheus.NewDesc("container_memory_working_set_bytes",
		"[STABLE] Current working set of the container in bytes", []string{"container", "pod", "namespace"}, nil)
	containerSwapUsageDesc = prometheus.NewDesc("container_swap_usage_bytes",
		"[ALPHA] Current amount of the container swap usage in bytes. Reported only on non-windows systems", []string{"container", "pod", "namespace"}, nil)
	containerStartTimeDesc = prometheus.NewDesc("container_start_time_seconds",
		"[STABLE] Start time of the container since unix epoch in seconds", []string{"container", "pod", "namespace"}, nil)
	podCPUUsageDesc = prometheus.NewDesc("pod_cpu_usage_seconds_total",
		"[STABLE] Cumulative cpu time consumed by the pod in core-seconds", []string{"pod", "namespace"}, nil)
	podMemoryUsageDesc = prometheus.NewDesc("pod_memory_working_set_bytes",
		"[STABLE] Current working set of the pod in bytes", []string{"pod", "namespace"}, nil)
	podSwapUsageDesc = prometheus.NewDesc("pod_swap_usage_bytes",
		"[ALPHA] Current amount of the pod swap usage in bytes. Reported only on non-windows systems", []string{"pod", "namespace"}, nil)
	// scrape_error is the older name of resource_scrape_error; both are
	// served so that scrapers of either find it.
	scrapeErrorDesc = prometheus.NewDesc("scrape_error",
		"[ALPHA] 1 if there was an error while getting container metrics, 0 otherwise", nil, nil)
	resourceScrapeErrorDesc = prometheus.NewDesc("resource_scrape_error",
		"[STABLE] 1 if there was an error while getting container metrics, 0 otherwise", nil, nil)
)

// resourceCollector turns one CPU-and-memory summary into the resource
// metrics. It is made per request, so that the summary is computed under
// the request's context.
type resourceCollector struct {
	ctx   context.Context
	stats SummaryProvider
}

func (c *resourceCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{nodeCPUUsageDesc, nodeMemoryUsageDesc, nodeSwapUsageDesc,
		containerStartTimeDesc, containerCPUUsageDesc, containerMemoryUsageDesc, containerSwapUsageDesc,
		podCPUUsageDesc, podMemoryUsageDesc, podSwapUsageDesc, scrapeErrorDesc, resourceScrapeErrorDesc} {
		ch <- d
	}
}

func (c *resourceCollector) Collect(ch chan<- prometheus.Metric) {
	failed := 0.0
	defer func() {
		ch <- prometheus.MustNewConstMetric(scrapeErrorDesc, prometheus.GaugeValue, failed)
		ch <- prometheus.MustNewConstMetric(resourceScrapeErrorDesc, prometheus.GaugeValue, failed)
	}()
	s, err := c.stats.Summary(c.ctx, true)
	if err != nil {
		failed = 1
		klog.FromContext(c.ctx).Error(err, "Getting the summary for resource metrics failed")
		return
	}
	at := func(t time.Time, m prometheus.Metric) prometheus.Metric {
		return prometheus.NewMetricWithTimestamp(t, m)
	}
	cpu := func(d *prometheus.Desc, st *statsapi.CPUStats, labels ...string) {
		if st != nil && st.UsageCoreNanoSeconds != nil {
			ch <- at(st.Time.Time, prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(*st.UsageCoreNanoSeconds)/float64(time.Second), labels...))
		}
	}
	mem := func(d *prometheus.Desc, st *statsapi.MemoryStats, labels ...string) {
		if st != nil && st.WorkingSetBytes != nil {
			ch <- at(st.Time.Time, prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(*st.WorkingSetBytes), labels...))
		}
	}
	swap := func(d *prometheus.Desc, st *statsapi.SwapStats, labels ...string) {
		if st != nil && st.SwapUsageBytes != nil {
			ch <- at(st.Time.Time, prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(*st.SwapUsageBytes), labels...))
		}
	}
	cpu(nodeCPUUsageDesc, s.Node.CPU)
	mem(nodeMemoryUsageDesc, s.Node.Memory)
	swap(nodeSwapUsageDesc, s.Node.Swap)
	for _, p := range s.Pods {
		for _, ctr := range p.Containers {
			if ctr.StartTime.Unix() > 0 {
				ch <- prometheus.MustNewConstMetric(containerStartTimeDesc, prometheus.GaugeValue,
					float64(ctr.StartTime.UnixNano())/float64(time.Second), ctr.Name, p.PodRef.Name, p.PodRef.Namespace)
			}
			cpu(containerCPUUsageDesc, ctr.CPU, ctr.Name, p.PodRef.Name, p.PodRef.Namespace)
			mem(containerMemoryUsageDesc, ctr.Memory, ctr.Name, p.PodRef.Name, p.PodRef.Namespace)
			swap(containerSwapUsageDesc, ctr.Swap, ctr.Name, p.PodRef.Name, p.PodRef.Namespace)
		}
		cpu(podCPUUsageDesc, p.CPU, p.PodRef.Name, p.PodRef.Namespace)
		mem(podMemoryUsageDesc, p.Memory, p.PodRef.Name, p.PodRef.Namespace)
		swap(podSwapUsageDesc, p.Swap, p.PodRef.Name, p.PodRef.Namespace)
	}
}

// getResourceMetrics answers /metrics/resource in the Prometheus formats.
func (a *api) getResourceMetrics(w http.ResponseWriter, r *http.Request) {
	reg := prometheus.NewRegistry()
	if err := reg.Register(&resourceCollector{ctx: r.Context(), stats: a.stats}); err != nil {
		writeError(w, r, err)
		return
	}
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}).ServeHTTP(w, r)
}
