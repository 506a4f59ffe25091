// Package metrics holds the agent's own Prometheus metrics, named and
// labelled as the kubelet's where they mean the same: pod workers, pod
// start latency, PLEG relists, CRI operations, probes, evictions, volume
// usage and the apiserver client. One Metrics value is made in the composition root and handed to
// the components that observe something; nothing here is package-level
// state, so tests make as many as they like.
package metrics

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus/collectors"
	compbase "k8s.io/component-base/metrics"
)

const kubeletSubsystem = "kubelet"

// The container states kubelet_running_containers is broken down by, as
// the kubelet spells them.
var containerStates = []string{"created", "running", "exited", "unknown"}

// podStartBuckets are the kubelet's bucket bounds for pod start latency:
// roughly exponential, in round everyday units.
var podStartBuckets = []float64{0.5, 1, 2, 3, 4, 5, 6, 8, 10, 20, 30, 45, 60, 120, 180, 240, 300, 360, 480, 600, 900, 1200, 1800, 2700, 3600}

// Metrics is the agent's registry of metrics with what observes them.
// Its methods are safe for concurrent use.
type Metrics struct {
	registry compbase.KubeRegistry // /metrics
	probes   compbase.KubeRegistry // /metrics/probes

	podWorkerDuration     *compbase.HistogramVec
	podStartDuration      *compbase.Histogram
	podStartSLIDuration   *compbase.HistogramVec
	podStartTotalDuration *compbase.HistogramVec
	podStepDuration       *compbase.HistogramVec

	imageVolumeRequested *compbase.Counter
	imageVolumeMounted   *compbase.Counter
	imageVolumeFailed    *compbase.Counter

	imageGarbageCollected *compbase.CounterVec

	evictions        *compbase.CounterVec
	evictionStatsAge *compbase.HistogramVec

	volumeMetricCollection *compbase.HistogramVec

	plegRelistDuration *compbase.Histogram
	plegRelistInterval *compbase.Histogram
	plegLastSeen       *compbase.Gauge
	runningPods        *compbase.Gauge
	runningContainers  *compbase.GaugeVec

	terminatedContainers *compbase.CounterVec

	runtimeOperations         *compbase.CounterVec
	runtimeOperationsErrors   *compbase.CounterVec
	runtimeOperationsDuration *compbase.HistogramVec

	restRequests *compbase.CounterVec
	restLatency  *compbase.HistogramVec

	probeTotal    *compbase.CounterVec
	probeDuration *compbase.HistogramVec
}

// New makes the metrics and registers them: the kubelet's on /metrics
// together with the Go runtime and process collectors, the prober's on
// /metrics/probes.
func New() *Metrics {
	m := &Metrics{
		registry: compbase.NewKubeRegistry(),
		probes:   compbase.NewKubeRegistry(),

		podWorkerDuration: compbase.NewHistogramVec(&compbase.HistogramOpts{
			Subsystem: kubeletSubsystem, Name: "pod_worker_duration_seconds",
			Help:    "Duration in seconds to sync a single pod. Broken down by operation type: create, update, or sync",
			Buckets: compbase.DefBuckets, StabilityLevel: compbase.ALPHA,
		}, []string{"operation_type"}),
		podStartDuration: compbase.NewHistogram(&compbase.HistogramOpts{
			Subsystem: kubeletSubsystem, Name: "pod_start_duration_seconds",
			Help:    "Duration in seconds from kubelet seeing a pod for the first time to the pod starting to run",
			Buckets: podStartBuckets, StabilityLevel: compbase.ALPHA,
		}),
		podStartSLIDuration: compbase.NewHistogramVec(&compbase.HistogramOpts{
			Subsystem: kubeletSubsystem, Name: "pod_start_sli_duration_seconds",
			Help:    "Duration in seconds to start a pod, excluding time to pull images and run init containers, measured from pod creation timestamp to when all its containers are reported as started and observed via watch",
			Buckets: podStartBuckets, StabilityLevel: compbase.ALPHA,
		}, []string{}),
		podStartTotalDuration: compbase.NewHistogramVec(&compbase.HistogramOpts{
			Subsystem: kubeletSubsystem, Name: "pod_start_total_duration_seconds",
			Help:    "Duration in seconds to start a pod since creation, including time to pull images and run init containers, measured from pod creation timestamp to when all its containers are reported as started and observed via watch",
			Buckets: podStartBuckets, StabilityLevel: compbase.ALPHA,
		}, []string{}),
		podStepDuration: newPodStepDuration(),

		imageVolumeRequested: compbase.NewCounter(&compbase.CounterOpts{
			Subsystem: "kubelet", Name: "image_volume_requested_total",
			Help: "Number of requested image volumes.", StabilityLevel: compbase.BETA,
		}),
		imageVolumeMounted: compbase.NewCounter(&compbase.CounterOpts{
			Subsystem: "kubelet", Name: "image_volume_mounted_succeed_total",
			Help: "Number of successful image volume mounts.", StabilityLevel: compbase.BETA,
		}),
		imageVolumeFailed: compbase.NewCounter(&compbase.CounterOpts{
			Subsystem: "kubelet", Name: "image_volume_mounted_errors_total",
			Help: "Number of failed image volume mounts.", StabilityLevel: compbase.BETA,
		}),
		imageGarbageCollected: compbase.NewCounterVec(&compbase.CounterOpts{
			Subsystem: kubeletSubsystem, Name: "image_garbage_collected_total",
			Help:           "Total number of images garbage collected by the kubelet, whether through disk usage or image age.",
			StabilityLevel: compbase.ALPHA,
		}, []string{"reason"}),
		evictions: compbase.NewCounterVec(&compbase.CounterOpts{
			Subsystem: kubeletSubsystem, Name: "evictions",
			Help:           "Cumulative number of pod evictions by eviction signal",
			StabilityLevel: compbase.ALPHA,
		}, []string{"eviction_signal"}),
		evictionStatsAge: compbase.NewHistogramVec(&compbase.HistogramOpts{
			Subsystem: kubeletSubsystem, Name: "eviction_stats_age_seconds",
			Help:    "Time between when stats are collected, and when pod is evicted based on those stats by eviction signal",
			Buckets: compbase.DefBuckets, StabilityLevel: compbase.ALPHA,
		}, []string{"eviction_signal"}),
		volumeMetricCollection: compbase.NewHistogramVec(&compbase.HistogramOpts{
			Subsystem: kubeletSubsystem, Name: "volume_metric_collection_duration_seconds",
			Help:    "Duration in seconds to calculate volume stats",
			Buckets: compbase.DefBuckets, StabilityLevel: compbase.ALPHA,
		}, []string{"metric_source"}),
		plegRelistDuration: compbase.NewHistogram(&compbase.HistogramOpts{
			Subsystem: kubeletSubsystem, Name: "pleg_relist_duration_seconds",
			Help:    "Duration in seconds for relisting pods in PLEG.",
			Buckets: compbase.DefBuckets, StabilityLevel: compbase.ALPHA,
		}),
		plegRelistInterval: compbase.NewHistogram(&compbase.HistogramOpts{
			Subsystem: kubeletSubsystem, Name: "pleg_relist_interval_seconds",
			Help:    "Interval in seconds between relisting in PLEG.",
			Buckets: compbase.DefBuckets, StabilityLevel: compbase.ALPHA,
		}),
		plegLastSeen: compbase.NewGauge(&compbase.GaugeOpts{
			Subsystem: kubeletSubsystem, Name: "pleg_last_seen_seconds",
			Help:           "Timestamp in seconds when PLEG was last seen active.",
			StabilityLevel: compbase.ALPHA,
		}),
		runningPods: compbase.NewGauge(&compbase.GaugeOpts{
			Subsystem: kubeletSubsystem, Name: "running_pods",
			Help:           "Number of pods that have a running pod sandbox",
			StabilityLevel: compbase.ALPHA,
		}),
		runningContainers: compbase.NewGaugeVec(&compbase.GaugeOpts{
			Subsystem: kubeletSubsystem, Name: "running_containers",
			Help:           "Number of containers currently running",
			StabilityLevel: compbase.ALPHA,
		}, []string{"container_state"}),
		terminatedContainers: compbase.NewCounterVec(&compbase.CounterOpts{
			Subsystem: kubeletSubsystem, Name: "terminated_containers_total",
			Help:           "Cumulative number of container terminations.",
			StabilityLevel: compbase.ALPHA,
		}, []string{"container_type", "exit_code", "reason"}),

		runtimeOperations: compbase.NewCounterVec(&compbase.CounterOpts{
			Subsystem: kubeletSubsystem, Name: "runtime_operations_total",
			Help:           "Cumulative number of runtime operations by operation type.",
			StabilityLevel: compbase.ALPHA,
		}, []string{"operation_type"}),
		runtimeOperationsErrors: compbase.NewCounterVec(&compbase.CounterOpts{
			Subsystem: kubeletSubsystem, Name: "runtime_operations_errors_total",
			Help:           "Cumulative number of runtime operation errors by operation type.",
			StabilityLevel: compbase.ALPHA,
		}, []string{"operation_type"}),
		runtimeOperationsDuration: compbase.NewHistogramVec(&compbase.HistogramOpts{
			Subsystem: kubeletSubsystem, Name: "runtime_operations_duration_seconds",
			Help:    "Duration in seconds of runtime operations. Broken down by operation type.",
			Buckets: compbase.ExponentialBuckets(.005, 2.5, 14), StabilityLevel: compbase.ALPHA,
		}, []string{"operation_type"}),

		restRequests: compbase.NewCounterVec(&compbase.CounterOpts{
			Name:           "rest_client_requests_total",
			Help:           "Number of HTTP requests, partitioned by status code, method, and host.",
			StabilityLevel: compbase.ALPHA,
		}, []string{"code", "method", "host"}),
		restLatency: compbase.NewHistogramVec(&compbase.HistogramOpts{
			Name:           "rest_client_request_duration_seconds",
			Help:           "Request latency in seconds. Broken down by verb, and host.",
			Buckets:        []float64{0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0},
			StabilityLevel: compbase.ALPHA,
		}, []string{"verb", "host"}),

		probeTotal: compbase.NewCounterVec(&compbase.CounterOpts{
			Subsystem: "prober", Name: "probe_total",
			Help:           "Cumulative number of a liveness, readiness or startup probe for a container by result.",
			StabilityLevel: compbase.BETA,
		}, []string{"probe_type", "result", "container", "pod", "namespace", "pod_uid"}),
		probeDuration: compbase.NewHistogramVec(&compbase.HistogramOpts{
			Subsystem: "prober", Name: "probe_duration_seconds",
			Help:           "Duration in seconds for a probe response.",
			StabilityLevel: compbase.ALPHA,
		}, []string{"probe_type", "container", "pod", "namespace"}),
	}
	m.registry.MustRegister(
		m.podWorkerDuration, m.podStartDuration, m.podStartSLIDuration, m.podStartTotalDuration, m.podStepDuration,
		m.imageVolumeRequested, m.imageVolumeMounted, m.imageVolumeFailed, m.imageGarbageCollected,
		m.evictions, m.evictionStatsAge, m.volumeMetricCollection,
		m.plegRelistDuration, m.plegRelistInterval, m.plegLastSeen, m.runningPods, m.runningContainers,
		m.terminatedContainers,
		m.runtimeOperations, m.runtimeOperationsErrors, m.runtimeOperationsDuration,
		m.restRequests, m.restLatency,
	)
	m.registry.RawMustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.probes.MustRegister(m.probeTotal, m.probeDuration)
	// The kubelet shows every state from its first relist on.
	for _, s := range containerStates {
		m.runningContainers.WithLabelValues(s).Set(0)
	}
	return m
}

// Handler serves /metrics.
func (m *Metrics) Handler() http.Handler {
	return compbase.HandlerFor(m.registry, compbase.HandlerOpts{ErrorHandling: compbase.ContinueOnError})
}

// ProbesHandler serves /metrics/probes.
func (m *Metrics) ProbesHandler() http.Handler {
	return compbase.HandlerFor(m.probes, compbase.HandlerOpts{ErrorHandling: compbase.ContinueOnError})
}

// Registry is where /metrics comes from, for tests that gather it.
func (m *Metrics) Registry() compbase.KubeRegistry { return m.registry }

// ProbesRegistry is where /metrics/probes comes from.
func (m *Metrics) ProbesRegistry() compbase.KubeRegistry { return m.probes }

// ObservePodWorker records one pass of a pod worker: create (its first),
// update (after a spec change), sync, kill (termination) or terminated.
func (m *Metrics) ObservePodWorker(operation string, d time.Duration) {
	m.podWorkerDuration.WithLabelValues(operation).Observe(d.Seconds())
}

// ObservePodStart records how long a pod took to run from when the agent
// first saw it.
func (m *Metrics) ObservePodStart(d time.Duration) {
	m.podStartDuration.Observe(d.Seconds())
}

// ObservePodStartSLI records a pod's start latency from its creation:
// sli without image pulls and init containers, total with them.
func (m *Metrics) ObservePodStartSLI(sli, total time.Duration) {
	m.podStartSLIDuration.WithLabelValues().Observe(sli.Seconds())
	m.podStartTotalDuration.WithLabelValues().Observe(total.Seconds())
}

// ObserveImageVolumes records a container created with image volumes:
// how many volumes it asked for, and how many of its mounts of them the
// runtime made or failed to make.
func (m *Metrics) ObserveImageVolumes(requested, mounted, failed int) {
	m.imageVolumeRequested.Add(float64(requested))
	m.imageVolumeMounted.Add(float64(mounted))
	m.imageVolumeFailed.Add(float64(failed))
}

// Reasons an image is garbage collected, as
// kubelet_image_garbage_collected_total labels them.
const (
	ImageGCReasonAge   = "age"
	ImageGCReasonSpace = "space"
)

// ObserveImageGarbageCollected counts an image removed by image garbage
// collection, for reason ImageGCReasonAge (unused for longer than
// imageMaximumGCAge) or ImageGCReasonSpace (to bring the image
// filesystem's usage down).
func (m *Metrics) ObserveImageGarbageCollected(reason string) {
	m.imageGarbageCollected.WithLabelValues(reason).Inc()
}

// ObserveRelist records one PLEG relist: how long it took, how long since
// the one before (zero for the first) and when it ended.
func (m *Metrics) ObserveRelist(duration, interval time.Duration, at time.Time) {
	m.plegRelistDuration.Observe(duration.Seconds())
	if interval > 0 {
		m.plegRelistInterval.Observe(interval.Seconds())
	}
	m.plegLastSeen.Set(float64(at.UnixNano()) / float64(time.Second))
}

// SetRuntimeCounts records what the last relist found: pods with a
// running sandbox and containers by state (created, running, exited,
// unknown); states missing from the map are zero.
func (m *Metrics) SetRuntimeCounts(runningPods int, containersByState map[string]int) {
	m.runningPods.Set(float64(runningPods))
	for _, s := range containerStates {
		m.runningContainers.WithLabelValues(s).Set(float64(containersByState[s]))
	}
}
