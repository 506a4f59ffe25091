package main

import (
	"flag"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/klog/v2"

	"github.com/nodeagent/nodeagent/pkg/imagegc"
	"github.com/nodeagent/nodeagent/pkg/podnet"
)

// flags holds the command line as given. Flags that mirror a
// KubeletConfiguration field win over the config file, as with the kubelet.
type flags struct {
	config                   string
	configDir                string
	kubeconfig               string
	bootstrapKubeconfig      string
	containerRuntimeEndpoint string
	nodeIP                   string
	hostnameOverride         string
	nodeLabels               string
	registerWithTaints       string
	providerID               string
	rootDir                  string
	certDir                  string
	runtimeCgroups           string
	cloudProvider            string
	podInfraContainerImage   string
	version                  string
	// imageGCPeriod is the hidden --image-gc-period: the end-to-end tests
	// shorten the kubelet's fixed five minutes with it.
	imageGCPeriod time.Duration
	// createStartDelay is the hidden --create-start-delay: the end-to-end
	// tests kill the agent between a container's create and its start.
	createStartDelay time.Duration
	// lockFile and exitOnLockContention are the kubelet's --lock-file and
	// --exit-on-lock-contention (lock.go).
	lockFile             string
	exitOnLockContention bool

	// The agent's own pod network (pkg/podnet), off by default.
	podNetwork       string
	cniConfDir       string
	podNetworkBridge string
	clusterCIDR      string

	fs *pflag.FlagSet
	// unsupported holds the known kubelet flags nodeagent accepts but ignores.
	unsupported map[string]*string
	// configValues holds the deprecated flags that mirror a config field (config_flags.go).
	configValues map[string]*string
}

// unsupportedBoolFlags and unsupportedValueFlags are kubelet flags nodeagent
// accepts so existing units and kubeadm flag files keep working; each one
// given yields one warning. Most mirror a config field: set it there.
var unsupportedBoolFlags = []string{
	"anonymous-auth", "authentication-token-webhook", "cgroups-per-qos", "contention-profiling", "cpu-cfs-quota",
	"enable-controller-attach-detach", "enable-debugging-handlers", "enable-server",
	"experimental-allocatable-ignore-eviction", "fail-cgroupv1", "fail-swap-on", "kernel-memcg-notification",
	"local-storage-capacity-isolation", "make-iptables-util-chains", "protect-kernel-defaults", "register-node",
	"rotate-certificates", "rotate-server-certificates", "runonce", "seccomp-default", "serialize-image-pulls",
	"log-json-split-stream", "log-text-split-stream",
}

var unsupportedValueFlags = []string{
	"address", "allowed-unsafe-sysctls", "authentication-token-webhook-cache-ttl", "authorization-mode",
	"authorization-webhook-cache-authorized-ttl", "authorization-webhook-cache-unauthorized-ttl", "cgroup-driver",
	"cgroup-root", "client-ca-file", "cluster-dns", "cluster-domain", "container-log-max-files", "container-log-max-size",
	"containerd", "containerd-namespace", "cpu-cfs-quota-period", "cpu-manager-policy", "cpu-manager-policy-options",
	"cpu-manager-reconcile-period", "enforce-node-allocatable", "event-burst", "event-qps", "eviction-hard",
	"eviction-max-pod-grace-period", "eviction-minimum-reclaim", "eviction-pressure-transition-period", "eviction-soft",
	"eviction-soft-grace-period", "experimental-mounter-path", "feature-gates", "file-check-frequency", "hairpin-mode",
	"healthz-bind-address", "healthz-port", "housekeeping-interval", "http-check-frequency",
	"image-credential-provider-bin-dir", "image-credential-provider-config", "image-gc-high-threshold",
	"image-gc-low-threshold", "image-service-endpoint", "kube-api-burst", "kube-api-content-type", "kube-api-qps",
	"kube-reserved", "kube-reserved-cgroup", "kubelet-cgroups", "log-flush-frequency",
	"log-json-info-buffer-size", "log-text-info-buffer-size", "logging-format", "manifest-url", "manifest-url-header",
	"max-open-files", "max-pods", "maximum-dead-containers", "maximum-dead-containers-per-container",
	"memory-manager-policy", "minimum-container-ttl-duration", "minimum-image-ttl-duration", "node-status-max-images",
	"node-status-update-frequency", "oom-score-adj", "pod-cidr", "pod-manifest-path", "pod-max-pids", "pods-per-core",
	"port", "qos-reserved", "read-only-port", "registry-burst", "registry-qps", "reserved-cpus", "reserved-memory",
	"resolv-conf", "runtime-request-timeout", "streaming-connection-idle-timeout", "sync-frequency", "system-cgroups",
	"system-reserved", "system-reserved-cgroup", "tls-cert-file", "tls-cipher-suites", "tls-min-version",
	"tls-private-key-file", "topology-manager-policy", "topology-manager-policy-options", "topology-manager-scope",
	"volume-plugin-dir", "volume-stats-agg-period",
}

// newFlags defines the command line. klogFlags receives -v and --vmodule.
func newFlags(klogFlags *flag.FlagSet) *flags {
	f := &flags{fs: pflag.NewFlagSet("nodeagent", pflag.ContinueOnError), unsupported: map[string]*string{}}
	fs := f.fs
	fs.StringVar(&f.config, "config", "", "Path to a KubeletConfiguration (kubelet.config.k8s.io/v1beta1) file.")
	fs.StringVar(&f.configDir, "config-dir", "", "Directory of KubeletConfiguration drop-ins (*.conf), merged in lexical order over --config.")
	fs.StringVar(&f.kubeconfig, "kubeconfig", "", "Path to the kubeconfig the agent uses to talk to the apiserver.")
	fs.StringVar(&f.bootstrapKubeconfig, "bootstrap-kubeconfig", "", "Path to a bootstrap kubeconfig: when --kubeconfig is missing or its client certificate unusable, a certificate is requested with these credentials and --kubeconfig is written.")
	fs.StringVar(&f.containerRuntimeEndpoint, "container-runtime-endpoint", "", "CRI endpoint (overrides containerRuntimeEndpoint), e.g. unix:///run/containerd/containerd.sock.")
	fs.StringVar(&f.nodeIP, "node-ip", "", "IP address (or comma-separated dual-stack pair) of the node; detected when empty.")
	fs.StringVar(&f.hostnameOverride, "hostname-override", "", "Name of the Node instead of the hostname.")
	fs.StringVar(&f.nodeLabels, "node-labels", "", "Labels to add when registering the Node (key=value,...).")
	fs.StringVar(&f.registerWithTaints, "register-with-taints", "", "Taints to add when registering the Node (key=value:Effect,...).")
	fs.StringVar(&f.providerID, "provider-id", "", "spec.providerID of the Node.")
	fs.StringVar(&f.rootDir, "root-dir", "/var/lib/kubelet", "Directory for the agent's files (pod volumes, plugins).")
	fs.StringVar(&f.certDir, "cert-dir", "", "Directory of TLS certificates; empty means <root-dir>/pki.")
	fs.StringVar(&f.runtimeCgroups, "runtime-cgroups", "", "Cgroup of the container runtime (overrides runtimeCgroups).")
	fs.StringVar(&f.cloudProvider, "cloud-provider", "", "Cloud provider: empty or \"external\".")
	fs.StringVar(&f.podInfraContainerImage, "pod-infra-container-image", "", "Deprecated and ignored: the runtime chooses the sandbox image.")
	fs.StringVar(&f.version, "version", "", "Print the version and exit.")
	fs.StringVar(&f.podNetwork, "pod-network", "", "The agent's own pod network, for clusters without a CNI DaemonSet: \"bridge\" writes the runtime's CNI configuration from the Node's spec.podCIDRs, routes other nodes' pod CIDRs via their InternalIPs (host-gw) and masquerades traffic leaving --cluster-cidr. Empty (the default) leaves pod networking to a CNI plugin, and removes what an earlier \"bridge\" made.")
	fs.StringVar(&f.cniConfDir, "cni-conf-dir", defaultCNIConfDir, "The runtime's CNI configuration directory, where --pod-network=bridge writes "+podnet.ConflistName+".")
	fs.StringVar(&f.podNetworkBridge, "pod-network-bridge", defaultPodNetworkBridge, "Bridge device of --pod-network=bridge.")
	fs.StringVar(&f.clusterCIDR, "cluster-cidr", "", "The cluster's pod range(s), comma-separated, one per IP family (the controller-manager's --cluster-cidr); required with --pod-network=bridge: pod traffic to anywhere else is masqueraded.")
	fs.StringVar(&f.lockFile, "lock-file", "", "A file to hold an flock on while the agent runs, waited for when another process holds it (the agent also always locks <root-dir>/"+rootLockName+", and refuses to start when another agent holds that).")
	fs.BoolVar(&f.exitOnLockContention, "exit-on-lock-contention", false, "Stop when another process opens --lock-file: the next agent, which waits for the lock, takes over.")
	fs.Lookup("version").NoOptDefVal = "true"
	fs.DurationVar(&f.imageGCPeriod, "image-gc-period", imagegc.DefaultPeriod, "How often image garbage collection runs; the kubelet's is fixed. For tests.")
	_ = fs.MarkHidden("image-gc-period")
	fs.DurationVar(&f.createStartDelay, "create-start-delay", 0, "Wait this long between creating a container and starting it: a window to kill the agent in. For tests.")
	_ = fs.MarkHidden("create-start-delay")

	for _, name := range []string{"v", "vmodule"} {
		if gf := klogFlags.Lookup(name); gf != nil {
			fs.AddGoFlag(gf)
		}
	}
	f.configValues = defineConfigFlags(fs)
	for _, name := range unsupportedBoolFlags {
		if _, mirrored := configFlags[name]; mirrored {
			continue
		}
		f.unsupported[name] = fs.String(name, "", "Accepted for kubelet compatibility; not supported, ignored.")
		fs.Lookup(name).NoOptDefVal = "true"
		_ = fs.MarkHidden(name)
	}
	for _, name := range unsupportedValueFlags {
		if _, mirrored := configFlags[name]; mirrored {
			continue
		}
		f.unsupported[name] = fs.String(name, "", "Accepted for kubelet compatibility; not supported, ignored.")
		_ = fs.MarkHidden(name)
	}
	return f
}

// parse reads args and returns one warning per accepted-but-ignored flag.
func (f *flags) parse(args []string) ([]string, error) {
	if err := f.fs.Parse(args); err != nil {
		return nil, err
	}
	if extra := f.fs.Args(); len(extra) > 0 {
		return nil, fmt.Errorf("unexpected arguments %q: nodeagent takes only flags", extra)
	}
	var warnings []string
	var names []string
	for name := range f.unsupported {
		if f.fs.Changed(name) {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	for _, name := range names {
		warnings = append(warnings, fmt.Sprintf("flag --%s is a kubelet flag nodeagent does not support; it is ignored (set the matching KubeletConfiguration field instead, where there is one)", name))
	}
	if f.fs.Changed("pod-infra-container-image") {
		warnings = append(warnings, "flag --pod-infra-container-image is deprecated and ignored: the container runtime's configured sandbox image is used")
	}
	return warnings, nil
}

// changed reports whether the flag was given on the command line.
func (f *flags) changed(name string) bool { return f.fs.Changed(name) }

// newKlogFlags registers klog's flags on a private Go flag set, so only -v
// and --vmodule are exposed.
func newKlogFlags() *flag.FlagSet {
	gfs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(gfs)
	return gfs
}

// splitList splits a comma-separated flag value, dropping empty items.
func splitList(s string) []string {
	var out []string
	for _, item := range strings.Split(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}
