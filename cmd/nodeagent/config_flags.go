package main

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
	sigsjson "sigs.k8s.io/json"

	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
)

// flagKind says how a config-mirror flag's text becomes a config value.
type flagKind int

const (
	kindString   flagKind = iota
	kindBool              // "true"/"false"; a bare flag means true
	kindInt               // integer
	kindFloat             // number (kubeAPIQPS and the like)
	kindDuration          // Go duration, kept as text ("1m0s")
	kindList              // comma-separated list
	kindMap               // k=v,k2=v2 (eviction thresholds use k<v)
	kindBoolMap           // k=true,k2=false (feature gates)
	kindMultimap          // k:v,k:v2,k2:v3, the flag repeatable (HTTP headers)
)

// configFlag is a deprecated kubelet flag that mirrors a KubeletConfiguration field. The
// kubelet still honours them, with a deprecation warning; old units, kind's kubeadm
// patches and distros pass them, so nodeagent honours them too.
type configFlag struct {
	path string // dotted JSON path in KubeletConfiguration
	kind flagKind
}

var configFlags = map[string]configFlag{
	"address":                                      {"address", kindString},
	"allowed-unsafe-sysctls":                       {"allowedUnsafeSysctls", kindList},
	"anonymous-auth":                               {"authentication.anonymous.enabled", kindBool},
	"authentication-token-webhook":                 {"authentication.webhook.enabled", kindBool},
	"authentication-token-webhook-cache-ttl":       {"authentication.webhook.cacheTTL", kindDuration},
	"authorization-mode":                           {"authorization.mode", kindString},
	"authorization-webhook-cache-authorized-ttl":   {"authorization.webhook.cacheAuthorizedTTL", kindDuration},
	"authorization-webhook-cache-unauthorized-ttl": {"authorization.webhook.cacheUnauthorizedTTL", kindDuration},
	"cgroup-driver":                                {"cgroupDriver", kindString},
	"cgroup-root":                                  {"cgroupRoot", kindString},
	"cgroups-per-qos":                              {"cgroupsPerQOS", kindBool},
	"client-ca-file":                               {"authentication.x509.clientCAFile", kindString},
	"cluster-dns":                                  {"clusterDNS", kindList},
	"cluster-domain":                               {"clusterDomain", kindString},
	"container-log-max-files":                      {"containerLogMaxFiles", kindInt},
	"container-log-max-size":                       {"containerLogMaxSize", kindString},
	"cpu-cfs-quota":                                {"cpuCFSQuota", kindBool},
	"cpu-cfs-quota-period":                         {"cpuCFSQuotaPeriod", kindDuration},
	"cpu-manager-policy":                           {"cpuManagerPolicy", kindString},
	"cpu-manager-reconcile-period":                 {"cpuManagerReconcilePeriod", kindDuration},
	"enable-controller-attach-detach":              {"enableControllerAttachDetach", kindBool},
	"enable-debugging-handlers":                    {"enableDebuggingHandlers", kindBool},
	"enable-server":                                {"enableServer", kindBool},
	"enforce-node-allocatable":                     {"enforceNodeAllocatable", kindList},
	"event-burst":                                  {"eventBurst", kindInt},
	"event-qps":                                    {"eventRecordQPS", kindInt},
	"eviction-hard":                                {"evictionHard", kindMap},
	"eviction-max-pod-grace-period":                {"evictionMaxPodGracePeriod", kindInt},
	"eviction-minimum-reclaim":                     {"evictionMinimumReclaim", kindMap},
	"eviction-pressure-transition-period":          {"evictionPressureTransitionPeriod", kindDuration},
	"eviction-soft":                                {"evictionSoft", kindMap},
	"eviction-soft-grace-period":                   {"evictionSoftGracePeriod", kindMap},
	"fail-cgroupv1":                                {"failCgroupV1", kindBool},
	"fail-swap-on":                                 {"failSwapOn", kindBool},
	"feature-gates":                                {"featureGates", kindBoolMap},
	"file-check-frequency":                         {"fileCheckFrequency", kindDuration},
	"hairpin-mode":                                 {"hairpinMode", kindString},
	"healthz-bind-address":                         {"healthzBindAddress", kindString},
	"healthz-port":                                 {"healthzPort", kindInt},
	"http-check-frequency":                         {"httpCheckFrequency", kindDuration},
	"image-gc-high-threshold":                      {"imageGCHighThresholdPercent", kindInt},
	"image-gc-low-threshold":                       {"imageGCLowThresholdPercent", kindInt},
	"image-service-endpoint":                       {"imageServiceEndpoint", kindString},
	"kube-api-burst":                               {"kubeAPIBurst", kindInt},
	"kube-api-content-type":                        {"contentType", kindString},
	"kube-api-qps":                                 {"kubeAPIQPS", kindFloat},
	"kube-reserved":                                {"kubeReserved", kindMap},
	"kube-reserved-cgroup":                         {"kubeReservedCgroup", kindString},
	"kubelet-cgroups":                              {"kubeletCgroups", kindString},
	"make-iptables-util-chains":                    {"makeIPTablesUtilChains", kindBool},
	"manifest-url":                                 {"staticPodURL", kindString},
	"manifest-url-header":                          {"staticPodURLHeader", kindMultimap},
	"max-open-files":                               {"maxOpenFiles", kindInt},
	"max-pods":                                     {"maxPods", kindInt},
	"minimum-image-ttl-duration":                   {"imageMinimumGCAge", kindDuration},
	"node-status-max-images":                       {"nodeStatusMaxImages", kindInt},
	"node-status-update-frequency":                 {"nodeStatusUpdateFrequency", kindDuration},
	"oom-score-adj":                                {"oomScoreAdj", kindInt},
	"pod-cidr":                                     {"podCIDR", kindString},
	"pod-manifest-path":                            {"staticPodPath", kindString},
	"pod-max-pids":                                 {"podPidsLimit", kindInt},
	"pods-per-core":                                {"podsPerCore", kindInt},
	"port":                                         {"port", kindInt},
	"protect-kernel-defaults":                      {"protectKernelDefaults", kindBool},
	"read-only-port":                               {"readOnlyPort", kindInt},
	"register-node":                                {"registerNode", kindBool},
	"registry-burst":                               {"registryBurst", kindInt},
	"registry-qps":                                 {"registryPullQPS", kindInt},
	"resolv-conf":                                  {"resolvConf", kindString},
	"rotate-certificates":                          {"rotateCertificates", kindBool},
	"rotate-server-certificates":                   {"serverTLSBootstrap", kindBool},
	"runtime-request-timeout":                      {"runtimeRequestTimeout", kindDuration},
	"seccomp-default":                              {"seccompDefault", kindBool},
	"serialize-image-pulls":                        {"serializeImagePulls", kindBool},
	"streaming-connection-idle-timeout":            {"streamingConnectionIdleTimeout", kindDuration},
	"sync-frequency":                               {"syncFrequency", kindDuration},
	"system-cgroups":                               {"systemCgroups", kindString},
	"system-reserved":                              {"systemReserved", kindMap},
	"system-reserved-cgroup":                       {"systemReservedCgroup", kindString},
	"tls-cert-file":                                {"tlsCertFile", kindString},
	"tls-cipher-suites":                            {"tlsCipherSuites", kindList},
	"tls-min-version":                              {"tlsMinVersion", kindString},
	"tls-private-key-file":                         {"tlsPrivateKeyFile", kindString},
	"topology-manager-policy":                      {"topologyManagerPolicy", kindString},
	"topology-manager-scope":                       {"topologyManagerScope", kindString},
	"volume-plugin-dir":                            {"volumePluginDir", kindString},
	"volume-stats-agg-period":                      {"volumeStatsAggPeriod", kindDuration},
}

// defineConfigFlags registers every config-mirror flag on fs as text, hidden from help.
func defineConfigFlags(fs *pflag.FlagSet) map[string]*string {
	values := map[string]*string{}
	for name, cf := range configFlags {
		usage := "Deprecated: set " + cf.path + " in the --config file."
		switch cf.kind {
		case kindMultimap:
			values[name] = new(string)
			fs.Var(repeatedValue{values[name]}, name, usage)
		case kindBool:
			values[name] = fs.String(name, "", usage)
			fs.Lookup(name).NoOptDefVal = "true"
		default:
			values[name] = fs.String(name, "", usage)
		}
		_ = fs.MarkHidden(name)
	}
	return values
}

// repeatedValue is the text of a flag that may be given several times:
// each value joins the ones before it after a comma, so that
// --manifest-url-header=a:1,b:2 --manifest-url-header=b:3 is a:1,b:2,b:3,
// as the kubelet merges them.
type repeatedValue struct{ s *string }

func (v repeatedValue) String() string {
	if v.s == nil {
		return ""
	}
	return *v.s
}

func (v repeatedValue) Set(s string) error {
	if *v.s != "" {
		s = *v.s + "," + s
	}
	*v.s = s
	return nil
}

func (v repeatedValue) Type() string { return "string" }

// applyConfigFlags sets the fields of kc named by the config-mirror flags given on the
// command line, which take precedence over the config file and its drop-ins. It returns
// the kubelet's deprecation warning for each, and an error naming a flag whose value does
// not parse.
func applyConfigFlags(kc *kubeletv1beta1.KubeletConfiguration, fs *pflag.FlagSet, values map[string]*string) ([]string, error) {
	var names []string
	for name := range values {
		if fs.Changed(name) {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return nil, nil
	}
	sort.Strings(names)
	data, err := json.Marshal(kc)
	if err != nil {
		return nil, err
	}
	var doc map[string]any
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, err
	}
	var warnings []string
	for _, name := range names {
		cf := configFlags[name]
		v, err := flagValue(cf.kind, *values[name])
		if err != nil {
			return warnings, fmt.Errorf("--%s: %w", name, err)
		}
		setPath(doc, strings.Split(cf.path, "."), v)
		warnings = append(warnings, fmt.Sprintf("flag --%s has been deprecated: set %s in the file given to --config instead", name, cf.path))
	}
	out, err := json.Marshal(doc)
	if err != nil {
		return warnings, err
	}
	updated := &kubeletv1beta1.KubeletConfiguration{}
	if err := sigsjson.UnmarshalCaseSensitivePreserveInts(out, updated); err != nil {
		return warnings, fmt.Errorf("flags: %w", err)
	}
	*kc = *updated
	return warnings, nil
}

func flagValue(kind flagKind, s string) (any, error) {
	switch kind {
	case kindBool:
		return strconv.ParseBool(s)
	case kindInt:
		return strconv.ParseInt(s, 10, 64)
	case kindFloat:
		return strconv.ParseFloat(s, 64)
	case kindDuration:
		d, err := time.ParseDuration(s)
		if err != nil {
			return nil, err
		}
		return d.String(), nil
	case kindList:
		list := splitList(s)
		if list == nil {
			list = []string{}
		}
		return list, nil
	case kindMap, kindBoolMap:
		m := map[string]any{}
		for _, item := range splitList(s) {
			// Eviction thresholds are written signal<value; the rest key=value.
			sep := strings.IndexAny(item, "=<")
			if sep <= 0 {
				return nil, fmt.Errorf("%q: want key=value", item)
			}
			key, val := strings.TrimSpace(item[:sep]), strings.TrimSpace(item[sep+1:])
			if kind == kindBoolMap {
				b, err := strconv.ParseBool(val)
				if err != nil {
					return nil, fmt.Errorf("%q: %w", item, err)
				}
				m[key] = b
				continue
			}
			m[key] = val
		}
		return m, nil
	case kindMultimap:
		m := map[string][]string{}
		for _, item := range splitList(s) {
			key, val, ok := strings.Cut(item, ":")
			if key = strings.TrimSpace(key); !ok || key == "" {
				return nil, fmt.Errorf("%q: want key:value", item)
			}
			m[key] = append(m[key], strings.TrimSpace(val))
		}
		return m, nil
	default:
		return s, nil
	}
}

// setPath replaces the value at path in doc, creating objects on the way.
func setPath(doc map[string]any, path []string, v any) {
	for _, p := range path[:len(path)-1] {
		next, ok := doc[p].(map[string]any)
		if !ok {
			next = map[string]any{}
			doc[p] = next
		}
		doc = next
	}
	doc[path[len(path)-1]] = v
}
