package runtime

import (
	"fmt"
	"strings"

	v1 "k8s.io/api/core/v1"
)

// EtcHostsPath is where every container finds the hosts file the agent
// manages for its pod.
const EtcHostsPath = "/etc/hosts"

// The first line of the hosts files the agent writes, as the kubelet
// words them; tools (and the conformance suite) look for them.
const (
	managedHostsHeader            = "# Kubernetes-managed hosts file.\n"
	managedHostsHeaderHostNetwork = "# Kubernetes-managed hosts file (host network).\n"
)

// PodHostnameAndDomain returns the name a pod knows itself by and, when
// it has a subdomain, its domain (<subdomain>.<ns>.svc.<clusterDomain>).
func PodHostnameAndDomain(pod *v1.Pod, clusterDomain string) (string, string) {
	h := pod.Name
	if pod.Spec.Hostname != "" {
		h = pod.Spec.Hostname
	}
	if len(h) > maxHostnameLen {
		h = strings.TrimRight(h[:maxHostnameLen], "-.")
	}
	domain := ""
	if pod.Spec.Subdomain != "" {
		domain = fmt.Sprintf("%s.%s.svc.%s", pod.Spec.Subdomain, pod.Namespace, clusterDomain)
	}
	return h, domain
}

// HostsFile is the content of a pod's /etc/hosts: for a host-network pod
// the node's file (nodeHosts) under a header, otherwise localhost, the
// pod's addresses with its hostname (and FQDN), then the pod's
// hostAliases.
func HostsFile(pod *v1.Pod, podIPs []string, clusterDomain string, nodeHosts []byte) []byte {
	var b strings.Builder
	if pod.Spec.HostNetwork {
		b.WriteString(managedHostsHeaderHostNetwork)
		b.Write(nodeHosts)
	} else {
		b.WriteString(managedHostsHeader)
		b.WriteString("127.0.0.1\tlocalhost\n")
		b.WriteString("::1\tlocalhost ip6-localhost ip6-loopback\n")
		b.WriteString("fe00::0\tip6-localnet\n")
		b.WriteString("fe00::0\tip6-mcastprefix\n")
		b.WriteString("fe00::1\tip6-allnodes\n")
		b.WriteString("fe00::2\tip6-allrouters\n")
		host, domain := PodHostnameAndDomain(pod, clusterDomain)
		for _, ip := range podIPs {
			if domain != "" {
				fmt.Fprintf(&b, "%s\t%s.%s\t%s\n", ip, host, domain, host)
			} else {
				fmt.Fprintf(&b, "%s\t%s\n", ip, host)
			}
		}
	}
	if len(pod.Spec.HostAliases) > 0 {
		b.WriteString("\n# Entries added by HostAliases.\n")
		for _, a := range pod.Spec.HostAliases {
			fmt.Fprintf(&b, "%s\t%s\n", a.IP, strings.Join(a.Hostnames, "\t"))
		}
	}
	return []byte(b.String())
}

// MountsEtcHosts says whether the container mounts a volume of its own
// at /etc/hosts, which the agent then leaves alone.
func MountsEtcHosts(c *v1.Container) bool {
	for _, m := range c.VolumeMounts {
		if strings.TrimRight(m.MountPath, "/") == EtcHostsPath {
			return true
		}
	}
	return false
}
