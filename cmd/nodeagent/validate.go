package main

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"

	"github.com/nodeagent/nodeagent/pkg/eviction"
	"github.com/nodeagent/nodeagent/pkg/node"
	"github.com/nodeagent/nodeagent/pkg/qos"
	"github.com/nodeagent/nodeagent/pkg/runtime"
	"github.com/nodeagent/nodeagent/pkg/userns"
)

// errInvalidConfig marks a configuration that failed validation.
var errInvalidConfig = errors.New("invalid KubeletConfiguration")

// validateKubeletConfig checks a defaulted configuration. Every error names
// the field as written in the config file, so a user can find it.
func validateKubeletConfig(kc *kubeletv1beta1.KubeletConfiguration) error {
	var errs []error
	fail := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", field, fmt.Sprintf(format, args...)))
	}
	positive := map[string]metav1.Duration{
		"syncFrequency":                  kc.SyncFrequency,
		"fileCheckFrequency":             kc.FileCheckFrequency,
		"httpCheckFrequency":             kc.HTTPCheckFrequency,
		"nodeStatusUpdateFrequency":      kc.NodeStatusUpdateFrequency,
		"nodeStatusReportFrequency":      kc.NodeStatusReportFrequency,
		"runtimeRequestTimeout":          kc.RuntimeRequestTimeout,
		"imageMinimumGCAge":              kc.ImageMinimumGCAge,
		"volumeStatsAggPeriod":           kc.VolumeStatsAggPeriod,
		"cpuManagerReconcilePeriod":      kc.CPUManagerReconcilePeriod,
		"streamingConnectionIdleTimeout": kc.StreamingConnectionIdleTimeout,
	}
	for _, field := range slices.Sorted(maps.Keys(positive)) {
		if positive[field].Duration <= 0 {
			fail(field, "must be > 0, got %v", positive[field].Duration)
		}
	}
	if q, err := resource.ParseQuantity(kc.ContainerLogMaxSize); err != nil || q.Value() <= 0 {
		fail("containerLogMaxSize", "must be a positive quantity, got %q", kc.ContainerLogMaxSize)
	}
	if kc.ContainerLogMaxFiles == nil || *kc.ContainerLogMaxFiles < 2 {
		fail("containerLogMaxFiles", "must be at least 2")
	}
	if kc.ContainerLogMonitorInterval.Duration < 3*time.Second {
		fail("containerLogMonitorInterval", "must be at least 3s, got %v", kc.ContainerLogMonitorInterval.Duration)
	}
	if kc.NodeLeaseDurationSeconds <= 0 {
		fail("nodeLeaseDurationSeconds", "must be > 0")
	}
	if kc.MaxPods <= 0 {
		fail("maxPods", "must be > 0")
	}
	if kc.UserNamespaces != nil && kc.UserNamespaces.IDsPerPod != nil {
		// The kubelet's words, which name the field themselves.
		if err := userns.ValidateIDsPerPod(*kc.UserNamespaces.IDsPerPod); err != nil {
			errs = append(errs, err)
		}
	}
	switch kc.MemorySwap.SwapBehavior {
	case "", qos.NoSwap, qos.LimitedSwap:
	default:
		fail("memorySwap.swapBehavior", "%q must be one of: \"\", %q or %q", kc.MemorySwap.SwapBehavior, qos.LimitedSwap, qos.NoSwap)
	}
	if kc.Port < 1 || kc.Port > 65535 {
		fail("port", "must be between 1 and 65535, got %d", kc.Port)
	}
	if kc.ReadOnlyPort < 0 || kc.ReadOnlyPort > 65535 {
		fail("readOnlyPort", "must be between 0 (off) and 65535, got %d", kc.ReadOnlyPort)
	}
	if p := *kc.HealthzPort; p < 0 || p > 65535 {
		fail("healthzPort", "must be between 0 (off) and 65535, got %d", p)
	}
	if net.ParseIP(kc.HealthzBindAddress) == nil {
		fail("healthzBindAddress", "%q is not an IP address", kc.HealthzBindAddress)
	}
	if net.ParseIP(kc.Address) == nil {
		fail("address", "%q is not an IP address", kc.Address)
	}
	for i, ip := range kc.ClusterDNS {
		if net.ParseIP(ip) == nil {
			fail(fmt.Sprintf("clusterDNS[%d]", i), "%q is not an IP address", ip)
		}
	}
	switch kc.CgroupDriver {
	case "cgroupfs", "systemd":
	default:
		fail("cgroupDriver", "must be cgroupfs or systemd, got %q", kc.CgroupDriver)
	}
	switch kc.Authorization.Mode {
	case kubeletv1beta1.KubeletAuthorizationModeWebhook, kubeletv1beta1.KubeletAuthorizationModeAlwaysAllow:
	default:
		fail("authorization.mode", "must be Webhook or AlwaysAllow, got %q", kc.Authorization.Mode)
	}
	high, low := *kc.ImageGCHighThresholdPercent, *kc.ImageGCLowThresholdPercent
	if high < 0 || high > 100 {
		fail("imageGCHighThresholdPercent", "must be between 0 and 100, got %d", high)
	}
	if low < 0 || low > 100 {
		fail("imageGCLowThresholdPercent", "must be between 0 and 100, got %d", low)
	}
	if low >= high {
		fail("imageGCLowThresholdPercent", "(%d) must be less than imageGCHighThresholdPercent (%d)", low, high)
	}
	if maxAge := kc.ImageMaximumGCAge.Duration; maxAge < 0 {
		fail("imageMaximumGCAge", "must not be negative, got %v", maxAge)
	} else if maxAge > 0 && maxAge <= kc.ImageMinimumGCAge.Duration {
		fail("imageMaximumGCAge", "(%v) must be greater than imageMinimumGCAge (%v)", maxAge, kc.ImageMinimumGCAge.Duration)
	}
	if *kc.NodeStatusMaxImages < -1 {
		fail("nodeStatusMaxImages", "must be -1 (no limit) or more, got %d", *kc.NodeStatusMaxImages)
	}
	for i, t := range kc.RegisterWithTaints {
		if err := node.ValidateTaint(t); err != nil {
			fail(fmt.Sprintf("registerWithTaints[%d]", i), "%v", err)
		}
	}
	if _, _, err := runtime.ParseEndpoint(kc.ContainerRuntimeEndpoint); err != nil {
		fail("containerRuntimeEndpoint", "%v", err)
	}
	if _, err := node.ParseThresholds("evictionHard", kc.EvictionHard); err != nil {
		errs = append(errs, err)
	} else if _, err := eviction.ParseThresholds(evictionSettings(kc)); err != nil {
		errs = append(errs, err)
	}
	if _, err := node.ParseReserved("kubeReserved", kc.KubeReserved); err != nil {
		errs = append(errs, err)
	}
	if _, err := node.ParseReserved("systemReserved", kc.SystemReserved); err != nil {
		errs = append(errs, err)
	}
	validateEnforcement(kc, fail)
	errs = append(errs, validateTracing(kc.Tracing)...)
	if _, err := pullPolicy(kc); err != nil {
		fail("imagePullCredentialsVerificationPolicy", "%v", err)
	}
	if len(errs) == 0 {
		return nil
	}
	// One line, fields in order, so the message reads well in a journal.
	msgs := make([]string, len(errs))
	for i, e := range errs {
		msgs[i] = e.Error()
	}
	return fmt.Errorf("%w: %s", errInvalidConfig, strings.Join(msgs, "; "))
}

// enforceNodeAllocatable keys, as the kubelet names them.
const (
	enforceNone                     = "none"
	enforceSystemReserved           = "system-reserved"
	enforceSystemReservedCompressed = "system-reserved-compressible"
	enforceKubeReserved             = "kube-reserved"
	enforceKubeReservedCompressed   = "kube-reserved-compressible"
)

// validateEnforcement checks enforceNodeAllocatable: known keys, each
// once, "none" alone, a reserved cgroup for each reservation enforced.
func validateEnforcement(kc *kubeletv1beta1.KubeletConfiguration, fail func(field, format string, args ...any)) {
	const field = "enforceNodeAllocatable"
	seen := map[string]bool{}
	for _, key := range kc.EnforceNodeAllocatable {
		if seen[key] {
			fail(field, "duplicated enforcement %q", key)
			continue
		}
		seen[key] = true
		switch key {
		case enforcePods:
		case enforceSystemReserved, enforceSystemReservedCompressed:
			if kc.SystemReservedCgroup == "" {
				fail("systemReservedCgroup", "must be set when %q or %q is in enforceNodeAllocatable", enforceSystemReserved, enforceSystemReservedCompressed)
			}
		case enforceKubeReserved, enforceKubeReservedCompressed:
			if kc.KubeReservedCgroup == "" {
				fail("kubeReservedCgroup", "must be set when %q or %q is in enforceNodeAllocatable", enforceKubeReserved, enforceKubeReservedCompressed)
			}
		case enforceNone:
			if len(kc.EnforceNodeAllocatable) > 1 {
				fail(field, "may not hold anything beside %q", enforceNone)
			}
		default:
			fail(field, "unknown enforcement %q, want %q, %q, %q, %q, %q or %q", key, enforcePods,
				enforceSystemReserved, enforceSystemReservedCompressed, enforceKubeReserved, enforceKubeReservedCompressed, enforceNone)
		}
	}
	if seen[enforceSystemReserved] && seen[enforceSystemReservedCompressed] {
		fail(field, "%q and %q exclude each other", enforceSystemReserved, enforceSystemReservedCompressed)
	}
	if seen[enforceKubeReserved] && seen[enforceKubeReservedCompressed] {
		fail(field, "%q and %q exclude each other", enforceKubeReserved, enforceKubeReservedCompressed)
	}
}
