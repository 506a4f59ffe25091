package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"

	"github.com/nodeagent/nodeagent/pkg/node"
)

// agentConfig is everything run needs, validated: the defaulted
// KubeletConfiguration plus the node-specific command-line settings.
type agentConfig struct {
	kubelet    *kubeletv1beta1.KubeletConfiguration
	kubeconfig string
	// bootstrapKubeconfig, when set, requests the kubeconfig's client
	// certificate when the kubeconfig is missing or unusable (TLS bootstrap).
	bootstrapKubeconfig string
	nodeName            string
	hostname            string
	nodeIPs             []net.IP
	nodeLabels          map[string]string
	rootDir             string
	certDir             string
	external            bool // --cloud-provider=external
	// runtimeCgroups is the runtime's cgroup (--runtime-cgroups), the
	// stats' runtime system container.
	runtimeCgroups string
	version        string
	// podNetwork is the agent's own pod network (--pod-network=bridge);
	// nil when off.
	podNetwork *podNetworkConfig
	// imageGCPeriod is how often image GC runs (the hidden
	// --image-gc-period).
	imageGCPeriod time.Duration
	// createStartDelay holds containers between create and start (the
	// hidden --create-start-delay, for tests).
	createStartDelay time.Duration
	// lockFile (--lock-file) is held while the agent runs, besides the
	// root dir's own lock; with exitOnLockContention the agent stops when
	// another process opens it.
	lockFile             string
	exitOnLockContention bool

	evictionHard   map[string]node.Threshold
	kubeReserved   v1.ResourceList
	systemReserved v1.ResourceList
}

// buildConfig loads the config files, lets flags override them, and
// validates the result. It touches nothing on the host. Warnings are
// returned even with an error, so a user sees every problem at once.
func buildConfig(f *flags) (*agentConfig, []string, error) {
	kc, warnings, err := loadKubeletConfig(f.config, f.configDir)
	if err != nil {
		return nil, warnings, err
	}
	flagWarnings, err := applyConfigFlags(kc, f.fs, f.configValues)
	warnings = append(warnings, flagWarnings...)
	if err != nil {
		return nil, warnings, err
	}
	if f.changed("container-runtime-endpoint") {
		kc.ContainerRuntimeEndpoint = f.containerRuntimeEndpoint
	}
	if f.changed("provider-id") {
		kc.ProviderID = f.providerID
	}
	if f.changed("register-with-taints") {
		taints, err := node.ParseTaints(f.registerWithTaints)
		if err != nil {
			return nil, warnings, err
		}
		kc.RegisterWithTaints = taints
	}
	applyEvictionDefaults(kc)
	if err := validateKubeletConfig(kc); err != nil {
		return nil, warnings, err
	}
	// No field is ignored in silence: each is honoured, warned or refused.
	fieldWarnings, err := checkConfigFields(kc)
	warnings = append(warnings, fieldWarnings...)
	if err != nil {
		return nil, warnings, err
	}

	cfg := &agentConfig{kubelet: kc, rootDir: f.rootDir, runtimeCgroups: f.runtimeCgroups, version: kubernetesVersion()}
	if cfg.kubeconfig, err = chooseKubeconfig(f.kubeconfig, f.bootstrapKubeconfig); err != nil {
		return nil, warnings, err
	}
	cfg.bootstrapKubeconfig = f.bootstrapKubeconfig
	switch f.cloudProvider {
	case "":
	case "external":
		cfg.external = true
	default:
		return nil, warnings, fmt.Errorf("--cloud-provider: %q is not supported, use \"external\" or leave it empty", f.cloudProvider)
	}
	if cfg.hostname, err = nodeHostname(f.hostnameOverride); err != nil {
		return nil, warnings, err
	}
	cfg.nodeName = cfg.hostname
	if cfg.nodeIPs, err = parseNodeIPs(f.nodeIP); err != nil {
		return nil, warnings, err
	}
	if cfg.nodeLabels, err = node.ParseLabels(f.nodeLabels); err != nil {
		return nil, warnings, err
	}
	if cfg.rootDir == "" || !filepath.IsAbs(cfg.rootDir) {
		return nil, warnings, fmt.Errorf("--root-dir: %q must be an absolute path", cfg.rootDir)
	}
	if cfg.podNetwork, err = buildPodNetworkConfig(f); err != nil {
		return nil, warnings, err
	}
	if f.imageGCPeriod <= 0 {
		return nil, warnings, fmt.Errorf("--image-gc-period: must be > 0, got %v", f.imageGCPeriod)
	}
	cfg.imageGCPeriod = f.imageGCPeriod
	if f.exitOnLockContention && f.lockFile == "" {
		return nil, warnings, errors.New("--exit-on-lock-contention: cannot exit on lock file contention: no --lock-file given")
	}
	cfg.lockFile, cfg.exitOnLockContention = f.lockFile, f.exitOnLockContention
	if f.createStartDelay < 0 {
		return nil, warnings, fmt.Errorf("--create-start-delay: must not be negative, got %v", f.createStartDelay)
	}
	cfg.createStartDelay = f.createStartDelay
	cfg.certDir = f.certDir
	if cfg.certDir == "" {
		cfg.certDir = filepath.Join(cfg.rootDir, "pki")
	}
	// Already validated; parsed again into the types the node controller takes.
	cfg.evictionHard, _ = node.ParseThresholds("evictionHard", kc.EvictionHard)
	cfg.kubeReserved, _ = node.ParseReserved("kubeReserved", kc.KubeReserved)
	cfg.systemReserved, _ = node.ParseReserved("systemReserved", kc.SystemReserved)
	return cfg, warnings, nil
}

// chooseKubeconfig returns the kubeconfig to use. A missing one is fine
// with a bootstrap kubeconfig, which run uses to write it.
func chooseKubeconfig(kubeconfig, bootstrap string) (string, error) {
	if kubeconfig == "" {
		return "", errors.New("--kubeconfig is required: standalone mode (no apiserver) is not supported yet")
	}
	if _, err := os.Stat(kubeconfig); err == nil {
		return kubeconfig, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("--kubeconfig %s: %w", kubeconfig, err)
	}
	if bootstrap != "" {
		if _, err := os.Stat(bootstrap); err != nil {
			return "", fmt.Errorf("--kubeconfig %s does not exist and --bootstrap-kubeconfig %w", kubeconfig, err)
		}
		return kubeconfig, nil
	}
	return "", fmt.Errorf("--kubeconfig %s does not exist (and no --bootstrap-kubeconfig was given)", kubeconfig)
}

// nodeHostname is --hostname-override or the host's name, lower-cased, as
// the kubelet does; it must be a valid Node name.
func nodeHostname(override string) (string, error) {
	name := strings.TrimSpace(override)
	if name == "" {
		h, err := os.Hostname()
		if err != nil {
			return "", fmt.Errorf("read hostname (set --hostname-override): %w", err)
		}
		name = h
	}
	name = strings.ToLower(strings.TrimSpace(name))
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return "", fmt.Errorf("--hostname-override: %q is not a valid node name: %s", name, strings.Join(errs, "; "))
	}
	return name, nil
}

// parseNodeIPs parses --node-ip: one address, or a dual-stack pair. An
// unspecified address (0.0.0.0, ::) means "detect".
func parseNodeIPs(s string) ([]net.IP, error) {
	items := splitList(s)
	if len(items) > 2 {
		return nil, fmt.Errorf("--node-ip: at most two addresses (one per IP family), got %d", len(items))
	}
	var ips []net.IP
	for _, item := range items {
		ip := net.ParseIP(item)
		if ip == nil {
			return nil, fmt.Errorf("--node-ip: %q is not an IP address", item)
		}
		if ip.IsUnspecified() {
			continue
		}
		ips = append(ips, ip)
	}
	if len(ips) == 2 && (ips[0].To4() != nil) == (ips[1].To4() != nil) {
		return nil, fmt.Errorf("--node-ip: two addresses must be one IPv4 and one IPv6, got %s", s)
	}
	return ips, nil
}
