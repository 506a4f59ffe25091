package runtime

import (
	"errors"
	"fmt"
	"path/filepath"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// maxHostnameLen is the longest hostname a sandbox may get (a DNS label).
const maxHostnameLen = 63

// PodOptions are the node-wide settings that shape every pod's sandbox.
type PodOptions struct {
	// PodLogsDir is the root of the pod log directories (podLogsDir).
	PodLogsDir string
	// CgroupParent is the cgroup every pod's sandbox is placed under.
	CgroupParent string
	// DNS is the cluster and host DNS configuration.
	DNS DNSOptions
	// Security holds the node's seccomp settings.
	Security SecurityOptions
}

// PodLogDir is the pod's log directory: <podLogsDir>/<ns>_<name>_<uid>,
// the layout the kubelet uses and log collectors expect.
func PodLogDir(podLogsDir string, pod *v1.Pod) string {
	return filepath.Join(podLogsDir, fmt.Sprintf("%s_%s_%s", pod.Namespace, pod.Name, pod.UID))
}

// SandboxConfig translates a pod into the sandbox the runtime creates;
// the warnings say what of the pod's wishes was adjusted on the way.
func SandboxConfig(pod *v1.Pod, attempt uint32, opts PodOptions) (*runtimeapi.PodSandboxConfig, []Warning, error) {
	dns, warnings, err := DNSConfig(pod, opts.DNS)
	if err != nil {
		return nil, nil, err
	}
	security, err := sandboxSecurity(pod, opts.Security)
	if err != nil {
		return nil, nil, err
	}
	hostname, err := podHostname(pod, opts.DNS.ClusterDomain)
	if err != nil {
		return nil, nil, err
	}
	cfg := &runtimeapi.PodSandboxConfig{
		Metadata: &runtimeapi.PodSandboxMetadata{
			Name: pod.Name, Namespace: pod.Namespace, Uid: string(pod.UID), Attempt: attempt,
		},
		Hostname:     hostname,
		LogDirectory: PodLogDir(opts.PodLogsDir, pod),
		DnsConfig:    dns,
		PortMappings: portMappings(pod),
		Labels:       sandboxLabels(pod),
		Annotations:  copyMap(pod.Annotations),
		Linux: &runtimeapi.LinuxPodSandboxConfig{
			CgroupParent:    opts.CgroupParent,
			SecurityContext: security,
			Sysctls:         podSysctls(pod),
		},
	}
	return cfg, warnings, nil
}

// maxFQDNLen is the longest name the kernel's nodename field holds.
const maxFQDNLen = 64

// podHostname is the pod's hostname: spec.hostnameOverride, or
// spec.hostname or the pod name truncated to a DNS label, or with
// setHostnameAsFQDN (and a subdomain, and no override) its fully
// qualified name. Host-network pods get none: they share the host's UTS
// namespace and its name.
func podHostname(pod *v1.Pod, clusterDomain string) (string, error) {
	if pod.Spec.HostNetwork {
		return "", nil
	}
	host, domain, err := PodHostnameAndDomain(pod, clusterDomain)
	if err != nil {
		return "", err
	}
	if domain == "" || pod.Spec.SetHostnameAsFQDN == nil || !*pod.Spec.SetHostnameAsFQDN {
		return host, nil
	}
	fqdn := host + "." + domain
	if len(fqdn) > maxFQDNLen {
		return "", fmt.Errorf("failed to construct FQDN from pod hostname and cluster domain, FQDN %s is too long (%d characters is the max, %d characters requested)", fqdn, maxFQDNLen, len(fqdn))
	}
	return fqdn, nil
}

// namespaceOptions are the pod's namespaces but its user namespace
// (userNamespace).
func namespaceOptions(pod *v1.Pod) *runtimeapi.NamespaceOption {
	ns := &runtimeapi.NamespaceOption{
		Network: runtimeapi.NamespaceMode_POD,
		Pid:     runtimeapi.NamespaceMode_CONTAINER,
		Ipc:     runtimeapi.NamespaceMode_POD,
	}
	if pod.Spec.HostNetwork {
		ns.Network = runtimeapi.NamespaceMode_NODE
	}
	if pod.Spec.HostIPC {
		ns.Ipc = runtimeapi.NamespaceMode_NODE
	}
	switch {
	case pod.Spec.HostPID:
		ns.Pid = runtimeapi.NamespaceMode_NODE
	case pod.Spec.ShareProcessNamespace != nil && *pod.Spec.ShareProcessNamespace:
		ns.Pid = runtimeapi.NamespaceMode_POD
	}
	return ns
}

// errNoPodUserNamespace refuses a hostUsers: false pod that was given no
// user namespace of its own: it must never run as the host's users.
var errNoPodUserNamespace = errors.New("can't set `spec.hostUsers: false`: the pod has no user namespace mappings")

// hostUsers says whether the pod runs in the host's user namespace.
func hostUsers(pod *v1.Pod) bool {
	return pod.Spec.HostUsers == nil || *pod.Spec.HostUsers
}

// userNamespace is the user namespace of the pod's sandbox and of each
// of its containers: own (the pod's mappings, pkg/userns) for a pod with
// hostUsers: false, else the node's, named explicitly as the kubelet
// names it.
func userNamespace(pod *v1.Pod, own *runtimeapi.UserNamespace) (*runtimeapi.UserNamespace, error) {
	if hostUsers(pod) {
		return &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_NODE}, nil
	}
	if own.GetMode() != runtimeapi.NamespaceMode_POD || len(own.GetUids()) == 0 || len(own.GetGids()) == 0 {
		return nil, errNoPodUserNamespace
	}
	return own, nil
}

func portMappings(pod *v1.Pod) []*runtimeapi.PortMapping {
	var out []*runtimeapi.PortMapping
	for _, c := range pod.Spec.Containers {
		for _, p := range c.Ports {
			proto := runtimeapi.Protocol_TCP
			switch p.Protocol {
			case v1.ProtocolUDP:
				proto = runtimeapi.Protocol_UDP
			case v1.ProtocolSCTP:
				proto = runtimeapi.Protocol_SCTP
			}
			hostPort := p.HostPort
			if pod.Spec.HostNetwork && hostPort == 0 {
				hostPort = p.ContainerPort
			}
			out = append(out, &runtimeapi.PortMapping{
				Protocol: proto, ContainerPort: p.ContainerPort, HostPort: hostPort, HostIp: p.HostIP,
			})
		}
	}
	return out
}

func copyMap(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
