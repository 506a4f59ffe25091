package metrics

import (
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	compbase "k8s.io/component-base/metrics"
)

// kubeletMetrics is every metric the kubelet of Kubernetes v1.37 registers
// for /metrics (the prober's for /metrics/probes), from
// pkg/kubelet/metrics/metrics.go and the other kubelet packages that
// register their own, with why the agent does not serve it; "" means it
// does. /metrics/resource and /metrics/cadvisor are not listed.
var kubeletMetrics = map[string]string{
	// pkg/kubelet/metrics/metrics.go
	"kubelet_node_name":                                         "a constant 1 labelled with the node name; nothing reads it",
	"kubelet_containers_per_pod_count":                          "not kept: a histogram of spec sizes, observed by the kubelet's pod manager",
	"kubelet_pod_worker_duration_seconds":                       "",
	"kubelet_pod_start_duration_seconds":                        "",
	"kubelet_pod_start_sli_duration_seconds":                    "",
	"kubelet_pod_start_total_duration_seconds":                  "",
	"kubelet_first_network_pod_start_sli_duration_seconds":      "not kept: a one-off gauge for the node's first pod network start",
	"kubelet_cgroup_manager_duration_seconds":                   "not kept: the agent's cgroup writes are not timed",
	"kubelet_pod_worker_start_duration_seconds":                 "no queue: a pod's worker starts when the pod arrives",
	"kubelet_pod_status_sync_duration_seconds":                  "not kept: status write latency is not timed",
	"kubelet_pleg_relist_duration_seconds":                      "",
	"kubelet_pleg_discard_events":                               "the PLEG never discards: it wakes workers through a coalescing slot",
	"kubelet_pleg_relist_interval_seconds":                      "",
	"kubelet_pleg_last_seen_seconds":                            "",
	"kubelet_pleg_pod_relist_duration_seconds":                  "no evented PLEG",
	"kubelet_evented_pleg_connection_error_count":               "no evented PLEG",
	"kubelet_evented_pleg_connection_success_count":             "no evented PLEG",
	"kubelet_evented_pleg_connection_latency_seconds":           "no evented PLEG",
	"kubelet_runtime_operations_total":                          "",
	"kubelet_runtime_operations_duration_seconds":               "",
	"kubelet_runtime_operations_errors_total":                   "",
	"kubelet_evictions":                                         "",
	"kubelet_eviction_stats_age_seconds":                        "",
	"kubelet_preemptions":                                       "no critical-pod preemption",
	"kubelet_device_plugin_registration_total":                  "no device plugins",
	"kubelet_device_plugin_alloc_duration_seconds":              "no device plugins",
	"kubelet_pod_resources_endpoint_requests_total":             "no pod resources API",
	"kubelet_pod_resources_endpoint_requests_list":              "no pod resources API",
	"kubelet_pod_resources_endpoint_requests_get_allocatable":   "no pod resources API",
	"kubelet_pod_resources_endpoint_errors_list":                "no pod resources API",
	"kubelet_pod_resources_endpoint_errors_get_allocatable":     "no pod resources API",
	"kubelet_pod_resources_endpoint_requests_get":               "no pod resources API",
	"kubelet_pod_resources_endpoint_errors_get":                 "no pod resources API",
	"kubelet_run_podsandbox_duration_seconds":                   "not kept: sandbox starts show in kubelet_runtime_operations_duration_seconds{operation_type=\"run_podsandbox\"}",
	"kubelet_run_podsandbox_errors_total":                       "not kept: sandbox failures show in kubelet_runtime_operations_errors_total{operation_type=\"run_podsandbox\"}",
	"kubelet_running_pods":                                      "",
	"kubelet_running_containers":                                "",
	"kubelet_desired_pods":                                      "not kept: pod manager gauges (the dispatcher holds the pods)",
	"kubelet_active_pods":                                       "not kept: pod manager gauges (the dispatcher holds the pods)",
	"kubelet_mirror_pods":                                       "not kept: pod manager gauges (the dispatcher holds the pods)",
	"kubelet_working_pods":                                      "not kept: pod worker gauges by lifecycle phase",
	"kubelet_orphaned_runtime_pods_total":                       "not kept: orphans are removed by garbage collection without a count",
	"kubelet_restarted_pods_total":                              "not kept: a pod recreated with the same UID is not counted",
	"kubelet_started_pods_total":                                "not yet: counted where the sync starts a sandbox (pkg/sync/start.go)",
	"kubelet_started_pods_errors_total":                         "not yet: counted where the sync starts a sandbox (pkg/sync/start.go)",
	"kubelet_started_containers_total":                          "not yet: counted where the sync starts a container (pkg/sync/start.go)",
	"kubelet_terminated_containers_total":                       "",
	"kubelet_started_containers_errors_total":                   "not yet: counted where the sync starts a container (pkg/sync/start.go)",
	"kubelet_started_host_process_containers_total":             "Windows only",
	"kubelet_started_host_process_containers_errors_total":      "Windows only",
	"kubelet_started_user_namespaced_pods_total":                "no user namespaces",
	"kubelet_started_user_namespaced_pods_errors_total":         "no user namespaces",
	"kubelet_managed_ephemeral_containers":                      "not kept: a gauge of ephemeral containers in pod specs",
	"kubelet_graceful_shutdown_start_time_seconds":              "no graceful node shutdown",
	"kubelet_graceful_shutdown_end_time_seconds":                "no graceful node shutdown",
	"kubelet_lifecycle_handler_http_fallbacks_total":            "no HTTPS-to-HTTP fallback for lifecycle hooks",
	"kubelet_cpu_manager_pinning_requests_total":                "no CPU manager",
	"kubelet_cpu_manager_pinning_errors_total":                  "no CPU manager",
	"kubelet_cpu_manager_shared_pool_size_millicores":           "no CPU manager",
	"kubelet_cpu_manager_exclusive_cpu_allocation_count":        "no CPU manager",
	"kubelet_cpu_manager_allocation_per_numa":                   "no CPU manager",
	"kubelet_container_aligned_compute_resources_count":         "no topology manager",
	"kubelet_container_aligned_compute_resources_failure_count": "no topology manager",
	"kubelet_memory_manager_pinning_requests_total":             "no memory manager",
	"kubelet_memory_manager_pinning_errors_total":               "no memory manager",
	"kubelet_memory_qos_node_memory_min_bytes":                  "no MemoryQoS",
	"kubelet_memory_qos_node_memory_low_bytes":                  "no MemoryQoS",
	"kubelet_topology_manager_admission_requests_total":         "no topology manager",
	"kubelet_topology_manager_admission_errors_total":           "no topology manager",
	"kubelet_topology_manager_admission_duration_ms":            "no topology manager",
	"kubelet_orphan_pod_cleaned_volumes":                        "not kept: orphaned pod directories are cleaned without a count",
	"kubelet_orphan_pod_cleaned_volumes_errors":                 "not kept: orphaned pod directories are cleaned without a count",
	"kubelet_node_startup_pre_kubelet_duration_seconds":         "not kept: node startup phases are not timed",
	"kubelet_node_startup_pre_registration_duration_seconds":    "not kept: node startup phases are not timed",
	"kubelet_node_startup_registration_duration_seconds":        "not kept: node startup phases are not timed",
	"kubelet_node_startup_post_registration_duration_seconds":   "not kept: node startup phases are not timed",
	"kubelet_node_startup_duration_seconds":                     "not kept: node startup phases are not timed",
	"kubelet_image_garbage_collected_total":                     "",
	"kubelet_image_pull_duration_seconds":                       "not kept: pulls are timed in logs only",
	"kubelet_sleep_action_terminated_early_total":               "not kept: a sleep hook cut short is not counted",
	"kubelet_cgroup_version":                                    "not kept: the cgroup version is logged at start",
	"dra_operations_duration_seconds":                           "no dynamic resource allocation",
	"dra_grpc_operations_duration_seconds":                      "no dynamic resource allocation",
	"dra_node_prepare_skips_total":                              "no dynamic resource allocation",
	"dra_node_unprepare_skips_total":                            "no dynamic resource allocation",
	"kubelet_admission_rejections_total":                        "not kept: rejections are events and the pod's status",
	"kubelet_image_volume_requested_total":                      "",
	"kubelet_image_volume_mounted_succeed_total":                "",
	"kubelet_image_volume_mounted_errors_total":                 "",
	"kubelet_container_requested_resizes_total":                 "not kept: in-place resize is not counted",
	"kubelet_pod_resize_duration_milliseconds":                  "not kept: in-place resize is not timed",
	"kubelet_pod_pending_resizes":                               "not kept: in-place resize is not counted",
	"kubelet_pod_infeasible_resizes_total":                      "not kept: in-place resize is not counted",
	"kubelet_pod_in_progress_resizes":                           "not kept: in-place resize is not counted",
	"kubelet_pod_deferred_accepted_resizes_total":               "not kept: in-place resize is not counted",
	"kubelet_pod_deferred_resize_duration_seconds":              "not kept: in-place resize is not timed",
	"kubelet_resource_manager_allocations_total":                "no CPU or memory manager",
	"kubelet_resource_manager_allocation_errors_total":          "no CPU or memory manager",
	"kubelet_resource_manager_container_assignments_total":      "no CPU or memory manager",
	"kubelet_pod_watch_events_dropped_total":                    "no /pods watch",
	"kubelet_pod_requests_total":                                "not kept: /pods requests are not counted",
	"kubelet_pod_requests_list_total":                           "not kept: /pods requests are not counted",
	"kubelet_pod_requests_get_total":                            "not kept: /pods requests are not counted",
	"kubelet_pod_requests_watch_total":                          "no /pods watch",
	"kubelet_pod_level_resources_admission_total":               "not kept: admissions are not counted by resource shape",
	// Served once the composition root hands over the stats provider
	// (ServeVolumeStats). kubelet_volume_stats_health_status_abnormal is
	// gone in v1.37: the Summary API's VolumeStats no longer carries a
	// volume's health.
	"kubelet_volume_stats_capacity_bytes":         "",
	"kubelet_volume_stats_available_bytes":        "",
	"kubelet_volume_stats_used_bytes":             "",
	"kubelet_volume_stats_inodes":                 "",
	"kubelet_volume_stats_inodes_free":            "",
	"kubelet_volume_stats_inodes_used":            "",
	"kubelet_container_log_filesystem_used_bytes": "not kept: log sizes are on /stats/summary only",
	"kubelet_podcertificate_states":               "no pod certificate projection states",

	// pkg/kubelet/prober: on /metrics/probes.
	"prober_probe_total":            "",
	"prober_probe_duration_seconds": "",

	// pkg/kubelet/server/metrics
	"kubelet_http_requests_total":                       "not kept: the node API's requests are not counted",
	"kubelet_http_requests_duration_seconds":            "not kept: the node API's requests are not timed",
	"kubelet_http_inflight_requests":                    "not kept: the node API's requests are not counted",
	"kubelet_volume_metric_collection_duration_seconds": "",
	"kubelet_metrics_provider":                          "not kept: stats come from the CRI only, there is no choice to report",
	"kubelet_websocket_streaming_requests_total":        "not kept: streaming requests are not counted",

	// pkg/kubelet/certificate
	"kubelet_server_expiration_renew_errors":                     "not kept: serving certificate renewals are logged",
	"kubelet_certificate_manager_server_rotation_seconds":        "not kept: serving certificate renewals are logged",
	"kubelet_certificate_manager_server_ttl_seconds":             "not kept: serving certificate renewals are logged",
	"kubelet_certificate_manager_client_expiration_renew_errors": "not kept: client certificate renewals are logged",

	// pkg/kubelet/images and images/pullmanager
	"kubelet_image_manager_ensure_image_requests_total":         "not kept: image pulls are not counted by policy",
	"kubelet_imagemanager_ondisk_pullintents":                   "no pull records (KEP-2535 credential verification)",
	"kubelet_imagemanager_ondisk_pulledrecords":                 "no pull records (KEP-2535 credential verification)",
	"kubelet_imagemanager_inmemory_pullintents_usage_percent":   "no pull records (KEP-2535 credential verification)",
	"kubelet_imagemanager_inmemory_pulledrecords_usage_percent": "no pull records (KEP-2535 credential verification)",
	"kubelet_imagemanager_image_mustpull_checks_total":          "no pull records (KEP-2535 credential verification)",

	// pkg/kubelet/volumemanager, pkg/kubelet/pluginmanager, pkg/volume/util
	"volume_manager_total_volumes":                                  "not kept: the volume manager is not instrumented",
	"reconstruct_volume_operations_total":                           "no volume reconstruction",
	"reconstruct_volume_operations_errors_total":                    "no volume reconstruction",
	"force_cleaned_failed_volume_operations_total":                  "no volume reconstruction",
	"force_cleaned_failed_volume_operation_errors_total":            "no volume reconstruction",
	"volume_manager_selinux_container_errors_total":                 "no SELinux mount labelling",
	"volume_manager_selinux_container_warnings_total":               "no SELinux mount labelling",
	"volume_manager_selinux_pod_context_mismatch_errors_total":      "no SELinux mount labelling",
	"volume_manager_selinux_pod_context_mismatch_warnings_total":    "no SELinux mount labelling",
	"volume_manager_selinux_volume_context_mismatch_errors_total":   "no SELinux mount labelling",
	"volume_manager_selinux_volume_context_mismatch_warnings_total": "no SELinux mount labelling",
	"volume_manager_selinux_volumes_admitted_total":                 "no SELinux mount labelling",
	"csi_node_storage_health_status":                                "no CSI volume health",
	"plugin_manager_total_plugins":                                  "not kept: CSI drivers registered are not counted",
	"storage_operation_duration_seconds":                            "not kept: volume operations are not timed",
	"volume_operation_total_seconds":                                "not kept: volume operations are not timed",
	"csi_operations_seconds":                                        "not kept: CSI calls are not timed",

	// pkg/credentialprovider/plugin
	"kubelet_credential_provider_plugin_errors_total": "no credential provider plugins",
	"kubelet_credential_provider_plugin_duration":     "no credential provider plugins",
	"kubelet_credential_provider_config_info":         "no credential provider plugins",
}

// registered says whether reg holds a metric of that name: registering
// another of the name is refused when it does.
func registered(t *testing.T, reg compbase.KubeRegistry, name string) bool {
	t.Helper()
	probe := prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: "registration probe"})
	if err := reg.Registerer().Register(probe); err != nil {
		return true
	}
	reg.Registerer().Unregister(probe)
	return false
}

func TestKubeletMetricNames(t *testing.T) {
	m := New()
	if err := m.ServeVolumeStats(&fakeVolumeStats{}); err != nil {
		t.Fatal(err)
	}
	names := make([]string, 0, len(kubeletMetrics))
	for name := range kubeletMetrics {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		why := kubeletMetrics[name]
		reg := m.Registry()
		if strings.HasPrefix(name, "prober_") {
			reg = m.ProbesRegistry()
		}
		switch served := registered(t, reg, name); {
		case why == "" && !served:
			t.Errorf("%s is listed as served but is not", name)
		case why != "" && served:
			t.Errorf("%s is served but listed as not (%s)", name, why)
		}
	}
}
