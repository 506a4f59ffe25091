package main

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	logsapi "k8s.io/component-base/logs/api/v1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"

	"github.com/nodeagent/nodeagent/pkg/eviction"
)

// defaultEvictionHard is what the kubelet uses on Linux when the config
// file sets no evictionHard at all.
func defaultEvictionHard() map[string]string { return eviction.DefaultEvictionHard() }

// gateEnabled reads a feature gate from the config, with the gate's default
// in this Kubernetes release when the config does not mention it.
func gateEnabled(kc *kubeletv1beta1.KubeletConfiguration, name string, def bool) bool {
	if v, ok := kc.FeatureGates[name]; ok {
		return v
	}
	return def
}

// setDefaults fills every unset field of kc the way the kubelet's v1beta1
// defaulting does: a zero value means "use the default", which is what
// kubeadm's config.yaml (full of 0s and {}) relies on. It is idempotent.
func setDefaults(kc *kubeletv1beta1.KubeletConfiguration) {
	dur := func(d *metav1.Duration, def time.Duration) {
		if d.Duration == 0 {
			d.Duration = def
		}
	}
	str := func(s *string, def string) {
		if *s == "" {
			*s = def
		}
	}
	boolp := func(b **bool, def bool) {
		if *b == nil {
			*b = ptr.To(def)
		}
	}
	i32p := func(i **int32, def int32) {
		if *i == nil {
			*i = ptr.To(def)
		}
	}
	i32 := func(i *int32, def int32) {
		if *i == 0 {
			*i = def
		}
	}

	boolp(&kc.EnableServer, true)
	dur(&kc.SyncFrequency, time.Minute)
	dur(&kc.FileCheckFrequency, 20*time.Second)
	dur(&kc.HTTPCheckFrequency, 20*time.Second)
	str(&kc.Address, "0.0.0.0")
	i32(&kc.Port, 10250)
	// readOnlyPort stays 0: off unless asked for.

	boolp(&kc.Authentication.Anonymous.Enabled, false)
	boolp(&kc.Authentication.Webhook.Enabled, true)
	dur(&kc.Authentication.Webhook.CacheTTL, 2*time.Minute)
	if kc.Authorization.Mode == "" {
		kc.Authorization.Mode = kubeletv1beta1.KubeletAuthorizationModeWebhook
	}
	dur(&kc.Authorization.Webhook.CacheAuthorizedTTL, 5*time.Minute)
	dur(&kc.Authorization.Webhook.CacheUnauthorizedTTL, 30*time.Second)

	i32p(&kc.RegistryPullQPS, 5)
	i32(&kc.RegistryBurst, 10)
	i32p(&kc.EventRecordQPS, 50)
	i32(&kc.EventBurst, 100)
	boolp(&kc.EnableDebuggingHandlers, true)
	i32p(&kc.HealthzPort, 10248)
	str(&kc.HealthzBindAddress, "127.0.0.1")
	i32p(&kc.OOMScoreAdj, -999)
	dur(&kc.StreamingConnectionIdleTimeout, 4*time.Hour)

	// The report frequency follows an explicitly set update frequency.
	if kc.NodeStatusReportFrequency.Duration == 0 {
		if kc.NodeStatusUpdateFrequency.Duration == 0 {
			kc.NodeStatusReportFrequency.Duration = 5 * time.Minute
		} else {
			kc.NodeStatusReportFrequency = kc.NodeStatusUpdateFrequency
		}
	}
	dur(&kc.NodeStatusUpdateFrequency, 10*time.Second)
	i32(&kc.NodeLeaseDurationSeconds, 40)

	dur(&kc.ImageMinimumGCAge, 2*time.Minute)
	i32p(&kc.ImageGCHighThresholdPercent, 85)
	i32p(&kc.ImageGCLowThresholdPercent, 80)
	dur(&kc.VolumeStatsAggPeriod, time.Minute)
	boolp(&kc.CgroupsPerQOS, true)
	str(&kc.CgroupDriver, "cgroupfs")
	str(&kc.CPUManagerPolicy, "none")
	dur(&kc.CPUManagerReconcilePeriod, 10*time.Second)
	str(&kc.MemoryManagerPolicy, kubeletv1beta1.NoneMemoryManagerPolicy)
	str(&kc.TopologyManagerPolicy, kubeletv1beta1.NoneTopologyManagerPolicy)
	str(&kc.TopologyManagerScope, kubeletv1beta1.ContainerTopologyManagerScope)
	dur(&kc.RuntimeRequestTimeout, 2*time.Minute)
	str(&kc.HairpinMode, kubeletv1beta1.PromiscuousBridge)
	i32(&kc.MaxPods, 110)
	if kc.PodPidsLimit == nil || *kc.PodPidsLimit < 0 {
		kc.PodPidsLimit = ptr.To[int64](-1)
	}
	if kc.ResolverConfig == nil {
		kc.ResolverConfig = ptr.To("/etc/resolv.conf")
	}
	boolp(&kc.CPUCFSQuota, true)
	if kc.CPUCFSQuotaPeriod == nil {
		kc.CPUCFSQuotaPeriod = &metav1.Duration{Duration: 100 * time.Millisecond}
	}
	i32p(&kc.NodeStatusMaxImages, 50)
	if kc.MaxOpenFiles == 0 {
		kc.MaxOpenFiles = 1000000
	}
	str(&kc.ContentType, "application/vnd.kubernetes.protobuf")
	i32p(&kc.KubeAPIQPS, 50)
	i32(&kc.KubeAPIBurst, 100)
	if kc.SerializeImagePulls == nil {
		kc.SerializeImagePulls = ptr.To(kc.MaxParallelImagePulls == nil || *kc.MaxParallelImagePulls < 2)
	}
	dur(&kc.EvictionPressureTransitionPeriod, 5*time.Minute)
	boolp(&kc.MergeDefaultEvictionSettings, false)
	boolp(&kc.EnableControllerAttachDetach, true)
	boolp(&kc.MakeIPTablesUtilChains, true)
	i32p(&kc.IPTablesMasqueradeBit, 14)
	i32p(&kc.IPTablesDropBit, 15)
	boolp(&kc.FailSwapOn, true)
	str(&kc.ContainerLogMaxSize, "10Mi")
	i32p(&kc.ContainerLogMaxFiles, 5)
	i32p(&kc.ContainerLogMaxWorkers, 1)
	if kc.ContainerLogMonitorInterval == nil {
		kc.ContainerLogMonitorInterval = &metav1.Duration{Duration: 10 * time.Second}
	}
	if kc.ConfigMapAndSecretChangeDetectionStrategy == "" {
		kc.ConfigMapAndSecretChangeDetectionStrategy = kubeletv1beta1.WatchChangeDetectionStrategy
	}
	if kc.EnforceNodeAllocatable == nil {
		kc.EnforceNodeAllocatable = []string{"pods"}
	}
	str(&kc.VolumePluginDir, "/usr/libexec/kubernetes/kubelet-plugins/volume/exec/")
	logsapi.SetRecommendedLoggingConfiguration(&kc.Logging)
	boolp(&kc.EnableSystemLogHandler, true)
	boolp(&kc.EnableProfilingHandler, true)
	boolp(&kc.EnableDebugFlagsHandler, true)
	boolp(&kc.SeccompDefault, false)
	boolp(&kc.FailCgroupV1, true)
	if kc.MemoryReservationPolicy == "" {
		kc.MemoryReservationPolicy = kubeletv1beta1.NoneMemoryReservationPolicy
	}
	boolp(&kc.RegisterNode, true)
	boolp(&kc.LocalStorageCapacityIsolation, true)
	str(&kc.ContainerRuntimeEndpoint, "unix:///run/containerd/containerd.sock")
	str(&kc.PodLogsDir, "/var/log/pods")

	// Both gates are beta and on by default in 1.37.
	if gateEnabled(kc, "KubeletCrashLoopBackOffMax", true) && kc.CrashLoopBackOff.MaxContainerRestartPeriod == nil {
		kc.CrashLoopBackOff.MaxContainerRestartPeriod = &metav1.Duration{Duration: 300 * time.Second}
	}
	if gateEnabled(kc, "KubeletEnsureSecretPulledImages", true) && kc.ImagePullCredentialsVerificationPolicy == "" {
		kc.ImagePullCredentialsVerificationPolicy = kubeletv1beta1.NeverVerifyPreloadedImages
	}
}

// applyEvictionDefaults mirrors the kubelet's loader: no evictionHard at
// all means the Linux defaults; a partial one is completed only when
// mergeDefaultEvictionSettings asks for it.
func applyEvictionDefaults(kc *kubeletv1beta1.KubeletConfiguration) {
	if kc.EvictionHard == nil {
		kc.EvictionHard = defaultEvictionHard()
		return
	}
	if kc.MergeDefaultEvictionSettings != nil && *kc.MergeDefaultEvictionSettings {
		for k, v := range defaultEvictionHard() {
			if _, ok := kc.EvictionHard[k]; !ok {
				kc.EvictionHard[k] = v
			}
		}
	}
}
