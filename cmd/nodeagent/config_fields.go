package main

import (
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"

	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
)

// fieldClass is what nodeagent does with a KubeletConfiguration field set
// to something other than its default.
type fieldClass int

const (
	// honoured: nodeagent does what the kubelet does with the value.
	honoured fieldClass = iota
	// warned: accepted with one warning at start; the node runs correctly
	// without it, and the note says what nodeagent does instead.
	warned
	// refused: the agent exits at start; running without the field would
	// be wrong or unsafe. The note says why.
	refused
)

func (c fieldClass) String() string {
	switch c {
	case honoured:
		return "honoured"
	case warned:
		return "warned"
	default:
		return "refused"
	}
}

// fieldRule classifies one field. note says where a honoured field is
// implemented, or what nodeagent does instead of a warned or refused one.
type fieldRule struct {
	class fieldClass
	note  string
	// fine, when set, accepts a non-default value silently after all
	// (a value that asks for what nodeagent does anyway).
	fine func(kc *kubeletv1beta1.KubeletConfiguration) bool
}

// Notes shared by several fields.
const (
	noGracefulOff = "graceful node shutdown is not implemented: the node's shutdown does not wait for pods"
	noCPUManager  = "no effect: the CPU, memory and topology managers are not implemented (their policies are refused)"
)

// configFields classifies every field of the v1beta1 KubeletConfiguration,
// by its dotted JSON path. A field inside a struct of the kubelet config
// package is classified on its own; any other value (a map, a list, a
// Duration, logging) as a whole. TestConfigFieldTable fails when a field is
// missing and keeps the README's list in step with this table.
var configFields = map[string]fieldRule{
	"address":                                    {class: honoured, note: "node API listen address (pkg/server)"},
	"allowedUnsafeSysctls":                       {class: honoured, note: "pod admission (pkg/admission)"},
	"authentication.anonymous.enabled":           {class: honoured, note: "node API authentication (pkg/server/authn.go)"},
	"authentication.webhook.cacheTTL":            {class: honoured, note: "TokenReview cache (pkg/server/token_cache.go)"},
	"authentication.webhook.enabled":             {class: honoured, note: "TokenReview authentication (pkg/server/authn.go)"},
	"authentication.x509.clientCAFile":           {class: honoured, note: "client certificates, reloaded on change (pkg/server)"},
	"authorization.mode":                         {class: honoured, note: "Webhook or AlwaysAllow (pkg/server/authz.go)"},
	"authorization.webhook.cacheAuthorizedTTL":   {class: honoured, note: "SubjectAccessReview cache (pkg/server/authz.go)"},
	"authorization.webhook.cacheUnauthorizedTTL": {class: honoured, note: "SubjectAccessReview cache (pkg/server/authz.go)"},
	"cgroupDriver":                               {class: honoured, note: "pod cgroups (pkg/cgroups)"},
	"cgroupRoot":                                 {class: honoured, note: "parent of kubepods (pkg/cgroups)"},
	"cgroupsPerQOS":                              {class: honoured, note: "the kubepods/QoS hierarchy (pkg/cgroups)"},
	"clusterDNS":                                 {class: honoured, note: "pods' resolv.conf (pkg/runtime)"},
	"clusterDomain":                              {class: honoured, note: "pods' resolv.conf search list (pkg/runtime)"},
	"configMapAndSecretChangeDetectionStrategy":  {class: warned, note: "nodeagent always watches the configMaps and secrets its pods reference, one watch per object (the default, Watch; pkg/objcache); Get and Cache are not offered"},
	"containerLogMaxFiles":                       {class: honoured, note: "log rotation (pkg/logs)"},
	"containerLogMaxSize":                        {class: honoured, note: "log rotation (pkg/logs)"},
	"containerLogMaxWorkers":                     {class: warned, note: "one worker rotates every container's log"},
	"containerLogMonitorInterval":                {class: honoured, note: "log rotation (pkg/logs)"},
	"containerRuntimeEndpoint":                   {class: honoured, note: "the CRI client (pkg/runtime)"},
	"contentType":                                {class: honoured, note: "apiserver client"},
	"cpuCFSQuota":                                {class: honoured, note: "container and pod CPU limits (pkg/qos, pkg/cgroups)"},
	"cpuCFSQuotaPeriod":                          {class: honoured, note: "container and pod CPU limits (pkg/qos, pkg/cgroups)"},
	"cpuManagerPolicy":                           {class: refused, note: "the CPU manager is not implemented: Guaranteed pods would not get the exclusive CPUs the policy promises"},
	"cpuManagerPolicyOptions":                    {class: warned, note: noCPUManager},
	"cpuManagerReconcilePeriod":                  {class: warned, note: noCPUManager},
	"crashLoopBackOff.maxContainerRestartPeriod": {class: honoured, note: "restart back-off cap (pkg/sync)"},
	"defaultPodSysctls":                          {class: warned, note: "pods get only the sysctls they ask for"},
	"enableContentionProfiling":                  {class: warned, note: "the profiler has no block or mutex profiles enabled"},
	"enableControllerAttachDetach":               {class: refused, note: "nodeagent does not attach volumes itself: with false, volumes that need attaching would never be attached"},
	"enableDebugFlagsHandler":                    {class: warned, note: "/debug/flags/v is not served"},
	"enableDebuggingHandlers":                    {class: honoured, note: "false answers exec, attach, portForward, run, containerLogs, runningpods, pprof and the pod timelines (/debug/pods/) with 405 and leaves /configz out (pkg/server)"},
	"enableProfilingHandler":                     {class: honoured, note: "/debug/pprof (pkg/server)"},
	"enableServer":                               {class: honoured, note: "false opens no node API on port (run.go)"},
	"enableSystemLogHandler":                     {class: honoured, note: "/logs/ serves the files under /var/log, with enableDebuggingHandlers (pkg/server)"},
	"enableSystemLogQuery":                       {class: honoured, note: "/logs/?query= reads a service's journal (journalctl) or its file under /var/log (pkg/server)"},
	"enforceNodeAllocatable":                     {class: honoured, note: "kubepods and reserved cgroup limits (cgroups.go)"},
	"eventBurst":                                 {class: warned, note: "events are sent with client-go's broadcaster defaults"},
	"eventRecordQPS":                             {class: warned, note: "events are sent with client-go's broadcaster defaults"},
	"evictionHard":                               {class: honoured, note: "eviction (pkg/eviction) and allocatable (pkg/node)"},
	"evictionMaxPodGracePeriod":                  {class: honoured, note: "eviction (pkg/eviction)"},
	"evictionMinimumReclaim":                     {class: honoured, note: "eviction (pkg/eviction)"},
	"evictionPressureTransitionPeriod":           {class: honoured, note: "eviction (pkg/eviction)"},
	"evictionSoft":                               {class: honoured, note: "eviction (pkg/eviction)"},
	"evictionSoftGracePeriod":                    {class: honoured, note: "eviction (pkg/eviction)"},
	"failCgroupV1":                               {class: honoured, note: "false is what nodeagent does: it runs on cgroup v1 either way (the default, true, is not enforced)"},
	"failSwapOn":                                 {class: honoured, note: "start-up swap check (swap.go)"},
	"featureGates":                               {class: honoured, note: "each gate checked: unknown or locked ones refused, others as listed below (feature_gates.go)"},
	"fileCheckFrequency":                         {class: honoured, note: "staticPodPath re-read period (pkg/config)"},
	"hairpinMode":                                {class: warned, note: "hairpin traffic is left to the CNI plugin"},
	"healthzBindAddress":                         {class: honoured, note: "healthz listener (pkg/server/healthz.go)"},
	"healthzPort":                                {class: honoured, note: "healthz listener; 0 turns it off (pkg/server/healthz.go)"},
	"httpCheckFrequency":                         {class: honoured, note: "staticPodURL poll period (pkg/config)"},
	"imageGCHighThresholdPercent":                {class: honoured, note: "image GC (pkg/imagegc)"},
	"imageGCLowThresholdPercent":                 {class: honoured, note: "image GC (pkg/imagegc)"},
	"imageMaximumGCAge":                          {class: honoured, note: "image GC (pkg/imagegc)"},
	"imageMinimumGCAge":                          {class: honoured, note: "image GC (pkg/imagegc)"},
	"imagePullCredentialsVerificationPolicy":     {class: honoured, note: "which present images a pod needs the pulling credentials for; records under image_manager in the root dir (pkg/pullrecords)"},
	"imageServiceEndpoint": {class: refused, note: "images are pulled through containerRuntimeEndpoint; a separate image service would hold other images",
		fine: func(kc *kubeletv1beta1.KubeletConfiguration) bool {
			return kc.ImageServiceEndpoint == kc.ContainerRuntimeEndpoint
		}},
	"iptablesDropBit":                      {class: warned, note: "no iptables chains are made (the kubelet's are deprecated too)"},
	"iptablesMasqueradeBit":                {class: warned, note: "no iptables chains are made (the kubelet's are deprecated too)"},
	"kernelMemcgNotification":              {class: warned, note: "eviction observes memory by polling, without the kernel's memcg notifications"},
	"kubeAPIBurst":                         {class: honoured, note: "apiserver client"},
	"kubeAPIQPS":                           {class: honoured, note: "apiserver client"},
	"kubeReserved":                         {class: honoured, note: "allocatable and kube-reserved enforcement (pkg/node, cgroups.go)"},
	"kubeReservedCgroup":                   {class: honoured, note: "kube-reserved enforcement (cgroups.go)"},
	"kubeletCgroups":                       {class: warned, note: "shown as the kubelet's system container in the Summary API; the agent does not move itself into it"},
	"localStorageCapacityIsolation":        {class: honoured, note: "local-storage limits enforced by eviction (pkg/eviction), ephemeral-storage in the node's capacity (pkg/node)"},
	"logging":                              {class: warned, note: "logs are klog text, at the verbosity of -v and --vmodule"},
	"makeIPTablesUtilChains":               {class: warned, note: "no iptables chains are made (the kubelet's are deprecated too)"},
	"maxOpenFiles":                         {class: warned, note: "the agent keeps the open-file limit it was started with (LimitNOFILE in its unit)"},
	"maxParallelImagePulls":                {class: honoured, note: "image pulls (pkg/sync)"},
	"maxPods":                              {class: honoured, note: "pod capacity and admission (pkg/node, pkg/sync)"},
	"memoryManagerPolicy":                  {class: refused, note: "the memory manager is not implemented: pods would not get the NUMA memory placement the policy promises"},
	"memoryReservationPolicy":              {class: warned, note: "no memory.min or memory.low protection is set"},
	"memorySwap.swapBehavior":              {class: honoured, note: "containers' swap limits (pkg/qos/swap.go); LimitedSwap on cgroup v1 refused at start, as the kubelet does"},
	"memoryThrottlingFactor":               {class: warned, note: "memory.high is not set (memory QoS is not implemented)"},
	"mergeDefaultEvictionSettings":         {class: honoured, note: "evictionHard defaulting (defaults.go)"},
	"nodeLeaseDurationSeconds":             {class: honoured, note: "node lease (pkg/node)"},
	"nodeStatusMaxImages":                  {class: honoured, note: "Node status images (pkg/node)"},
	"nodeStatusReportFrequency":            {class: honoured, note: "Node status (pkg/node)"},
	"nodeStatusUpdateFrequency":            {class: honoured, note: "Node status (pkg/node); while the agent starts, a node not yet Ready is looked at every 500 ms for up to 2 minutes, so it turns Ready as soon as it is, as a starting kubelet does"},
	"oomScoreAdj":                          {class: warned, note: "the agent keeps the oom_score_adj it was started with (OOMScoreAdjust in its unit)"},
	"podCIDR":                              {class: warned, note: "the pod CIDR is the Node's spec.podCIDR, from the controller-manager"},
	"podLogsDir":                           {class: honoured, note: "container log paths (pkg/runtime, pkg/gc)"},
	"podPidsLimit":                         {class: honoured, note: "pod cgroups (pkg/cgroups)"},
	"podsPerCore":                          {class: refused, note: "nodeagent would report and admit maxPods pods, more than podsPerCore allows"},
	"port":                                 {class: honoured, note: "node API port (pkg/server)"},
	"preloadedImagesVerificationAllowlist": {class: honoured, note: "images NeverVerifyAllowlistedImages trusts (pkg/pullrecords)"},
	"protectKernelDefaults":                {class: warned, note: "the kernel's settings are neither checked nor set"},
	"providerID":                           {class: honoured, note: "Node spec.providerID (pkg/node)"},
	"qosReserved":                          {class: warned, note: "no memory is held back from lower QoS classes"},
	"readOnlyPort":                         {class: warned, note: "the read-only port is not served; use the authenticated port"},
	"registerNode":                         {class: warned, note: "the Node is created when it does not exist"},
	"registerWithTaints":                   {class: honoured, note: "Node registration (pkg/node)"},
	"registryBurst":                        {class: warned, note: "pulls are bounded by serializeImagePulls and maxParallelImagePulls only"},
	"registryPullQPS":                      {class: warned, note: "pulls are bounded by serializeImagePulls and maxParallelImagePulls only"},
	"reservedMemory":                       {class: warned, note: noCPUManager},
	"reservedSystemCPUs":                   {class: refused, note: "the CPUs would not be taken from allocatable nor kept from pods"},
	"resolvConf":                           {class: honoured, note: "pods' resolv.conf (pkg/runtime)"},
	"rotateCertificates":                   {class: honoured, note: "client certificate rotation (certs.go)"},
	"runOnce":                              {class: refused, note: "run-once mode is not implemented; nodeagent would run as a long-lived agent"},
	"runtimeRequestTimeout":                {class: honoured, note: "CRI calls (pkg/runtime)"},
	"seccompDefault":                       {class: honoured, note: "RuntimeDefault seccomp (pkg/runtime)"},
	"serializeImagePulls":                  {class: honoured, note: "image pulls (pkg/sync)"},
	"serverTLSBootstrap":                   {class: honoured, note: "serving certificate from the kubelet-serving signer (certs.go)"},
	"showHiddenMetricsForVersion":          {class: warned, note: "no hidden metrics are shown"},
	"shutdownGracePeriod":                  {class: warned, note: noGracefulOff},
	"shutdownGracePeriodByPodPriority":     {class: warned, note: noGracefulOff},
	"shutdownGracePeriodCriticalPods":      {class: warned, note: noGracefulOff},
	"singleProcessOOMKill":                 {class: honoured, note: "memory.oom.group (pkg/qos)"},
	"staticPodPath":                        {class: honoured, note: "static pods (pkg/config)"},
	"staticPodURL":                         {class: honoured, note: "static pods over HTTP (pkg/config)"},
	"staticPodURLHeader":                   {class: honoured, note: "static pods over HTTP (pkg/config)"},
	"streamingConnectionIdleTimeout":       {class: honoured, note: "exec, attach, port-forward and log streams (pkg/server)"},
	"syncFrequency":                        {class: honoured, note: "pod volume refresh, and how long a pod with nothing to do waits before its worker looks again (plus up to half of it at random, as the kubelet) (pkg/sync)"},
	"systemCgroups":                        {class: warned, note: "the host's other processes are left in their cgroups"},
	"systemReserved":                       {class: honoured, note: "allocatable and system-reserved enforcement (pkg/node, cgroups.go)"},
	"systemReservedCgroup":                 {class: honoured, note: "system-reserved enforcement (cgroups.go)"},
	"tlsCertFile":                          {class: honoured, note: "node API serving certificate, reloaded on change (pkg/server)"},
	"tlsCipherSuites":                      {class: honoured, note: "node API TLS (pkg/server/tls.go)"},
	"tlsCurvePreferences":                  {class: warned, note: "the node API uses Go's default curves"},
	"tlsMinVersion":                        {class: honoured, note: "node API TLS (pkg/server/tls.go)"},
	"tlsPrivateKeyFile":                    {class: honoured, note: "node API serving certificate, reloaded on change (pkg/server)"},
	"topologyManagerPolicy":                {class: refused, note: "the topology manager is not implemented: pods the policy would reject for poor NUMA alignment would be admitted"},
	"topologyManagerPolicyOptions":         {class: warned, note: noCPUManager},
	"topologyManagerScope":                 {class: warned, note: noCPUManager},
	"tracing":                              {class: honoured, note: "OTLP spans of pods' starts and terminations, their steps and CRI calls (pkg/timeline/trace.go, tracing.go)"},
	"userNamespaces.idsPerPod":             {class: honoured, note: "the IDs of each hostUsers: false pod's user namespace, checked as the kubelet checks it (pkg/userns)"},
	"volumePluginDir":                      {class: warned, note: "FlexVolume drivers are not supported"},
	"volumeStatsAggPeriod":                 {class: honoured, note: "volume usage in the Summary API (pkg/stats)"},
}

// errUnsupportedConfig marks a configuration nodeagent refuses to run with.
var errUnsupportedConfig = errors.New("KubeletConfiguration asks for what nodeagent cannot do")

// checkConfigFields returns one warning per warned field set to a
// non-default value, and an error naming every refused one (and every bad
// feature gate). kc must be defaulted as buildConfig leaves it.
func checkConfigFields(kc *kubeletv1beta1.KubeletConfiguration) ([]string, error) {
	ref := &kubeletv1beta1.KubeletConfiguration{FeatureGates: kc.FeatureGates}
	setDefaults(ref)
	applyEvictionDefaults(ref)
	var warnings, refusals []string
	for _, path := range configFieldPaths() {
		rule, ok := configFields[path]
		if !ok || rule.class == honoured {
			continue
		}
		if isDefaultValue(fieldByPath(kc, path), fieldByPath(ref, path)) || (rule.fine != nil && rule.fine(kc)) {
			continue
		}
		if rule.class == warned {
			warnings = append(warnings, fmt.Sprintf("%s is set but not implemented by nodeagent, which accepts it and goes on: %s", path, rule.note))
			continue
		}
		refusals = append(refusals, fmt.Sprintf("%s: %s", path, rule.note))
	}
	gateWarnings, gateErrs := checkFeatureGates(kc.FeatureGates)
	warnings = append(warnings, gateWarnings...)
	refusals = append(refusals, gateErrs...)
	// setDefaults fills the cap only with the gate on, so a cap here was
	// written with the gate off, which the kubelet refuses.
	if !gateEnabled(kc, "KubeletCrashLoopBackOffMax", true) && kc.CrashLoopBackOff.MaxContainerRestartPeriod != nil {
		refusals = append(refusals, "crashLoopBackOff.maxContainerRestartPeriod: must not be set while the KubeletCrashLoopBackOffMax feature gate is off")
	}
	if len(refusals) == 0 {
		return warnings, nil
	}
	return warnings, fmt.Errorf("%w: %s", errUnsupportedConfig, strings.Join(refusals, "; "))
}

// configFieldPaths walks KubeletConfiguration by reflection and returns the
// dotted JSON path of every field, sorted.
func configFieldPaths() []string {
	var out []string
	var walk func(t reflect.Type, prefix string)
	walk = func(t reflect.Type, prefix string) {
		for i := range t.NumField() {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if !f.IsExported() || name == "-" || f.Anonymous {
				continue // TypeMeta: apiVersion and kind are checked on read
			}
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct && ft.PkgPath() == kubeletConfigPkg {
				walk(ft, prefix+name+".")
				continue
			}
			out = append(out, prefix+name)
		}
	}
	walk(reflect.TypeFor[kubeletv1beta1.KubeletConfiguration](), "")
	sort.Strings(out)
	return out
}

// kubeletConfigPkg is the package whose structs configFieldPaths walks into.
var kubeletConfigPkg = reflect.TypeFor[kubeletv1beta1.KubeletConfiguration]().PkgPath()

// fieldByPath returns the field of kc at a dotted JSON path; the zero Value
// when a struct on the way is a nil pointer.
func fieldByPath(kc *kubeletv1beta1.KubeletConfiguration, path string) reflect.Value {
	v := reflect.ValueOf(kc).Elem()
	for _, name := range strings.Split(path, ".") {
		if v.Kind() == reflect.Pointer {
			if v.IsNil() {
				return reflect.Value{}
			}
			v = v.Elem()
		}
		found := false
		for i := range v.NumField() {
			if tag, _, _ := strings.Cut(v.Type().Field(i).Tag.Get("json"), ","); tag == name {
				v, found = v.Field(i), true
				break
			}
		}
		if !found {
			return reflect.Value{}
		}
	}
	return v
}

// isDefaultValue says whether v is the default def, or whether both are
// "nothing" (zero, nil, empty, or a pointer to a zero value), which is how
// fields without a default in setDefaults look when left out.
func isDefaultValue(v, def reflect.Value) bool {
	if v.IsValid() && def.IsValid() && reflect.DeepEqual(v.Interface(), def.Interface()) {
		return true
	}
	return isNothing(v) && isNothing(def)
}

func isNothing(v reflect.Value) bool {
	if !v.IsValid() || v.IsZero() {
		return true
	}
	switch v.Kind() {
	case reflect.Pointer:
		return isNothing(v.Elem())
	case reflect.Map, reflect.Slice:
		return v.Len() == 0
	}
	return false
}

// configFieldsMarkdown is the README's list of fields, generated from
// configFields (TestConfigFieldTable checks README.md holds it).
func configFieldsMarkdown() string {
	var b strings.Builder
	counts := map[fieldClass]int{}
	for _, r := range configFields {
		counts[r.class]++
	}
	fmt.Fprintf(&b, "Every KubeletConfiguration field, and what nodeagent does when it is set to something other\n"+
		"than its default (%d honoured, %d warned, %d refused). A field left at its default says nothing.\n"+
		"**warned**: accepted with one warning at start, the node runs correctly without it; **refused**:\n"+
		"the agent exits at start naming the field.\n\n",
		counts[honoured], counts[warned], counts[refused])
	b.WriteString("| field | class | what nodeagent does |\n|---|---|---|\n")
	for _, path := range configFieldPaths() {
		r := configFields[path]
		fmt.Fprintf(&b, "| `%s` | %s | %s |\n", path, r.class, r.note)
	}
	b.WriteString("\n")
	b.WriteString(featureGatesMarkdown())
	return b.String()
}
