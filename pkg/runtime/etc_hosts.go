package runtime

import (
	"fmt"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
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
// it has a subdomain, its domain (<subdomain>.<ns>.svc.<clusterDomain>),
// as the kubelet makes them: spec.hostnameOverride as it is, with no
// domain whatever the subdomain; else spec.hostname or the pod's name.
// The name is cut to 63 characters. Names the apiserver would refuse (a
// static pod's) are errors, in the kubelet's words.
func PodHostnameAndDomain(pod *v1.Pod, clusterDomain string) (string, string, error) {
	if o := pod.Spec.HostnameOverride; o != nil {
		if msgs := validation.IsDNS1123Subdomain(*o); len(msgs) != 0 {
			return "", "", fmt.Errorf("pod HostnameOverride %q is not a valid DNS subdomain: %s", *o, strings.Join(msgs, ";"))
		}
		h, err := truncateHostname(pod, *o)
		return h, "", err
	}
	h := pod.Name
	if pod.Spec.Hostname != "" {
		if msgs := validation.IsDNS1123Label(pod.Spec.Hostname); len(msgs) != 0 {
			return "", "", fmt.Errorf("pod Hostname %q is not a valid DNS label: %s", pod.Spec.Hostname, strings.Join(msgs, ";"))
		}
		h = pod.Spec.Hostname
	}
	h, err := truncateHostname(pod, h)
	if err != nil {
		return "", "", err
	}
	domain := ""
	if pod.Spec.Subdomain != "" {
		if msgs := validation.IsDNS1123Label(pod.Spec.Subdomain); len(msgs) != 0 {
			return "", "", fmt.Errorf("pod Subdomain %q is not a valid DNS label: %s", pod.Spec.Subdomain, strings.Join(msgs, ";"))
		}
		domain = fmt.Sprintf("%s.%s.svc.%s", pod.Spec.Subdomain, pod.Namespace, clusterDomain)
	}
	return h, domain, nil
}

// truncateHostname cuts a hostname to what the kernel holds, never ending
// it on '-' or '.'.
func truncateHostname(pod *v1.Pod, h string) (string, error) {
	if len(h) <= maxHostnameLen {
		return h, nil
	}
	cut := strings.TrimRight(h[:maxHostnameLen], "-.")
	if cut == "" {
		return "", fmt.Errorf("hostname for pod %q was invalid: %q", pod.Name, h)
	}
	return cut, nil
}

// HostsFile is the content of a pod's /etc/hosts: for a host-network pod
// the node's file (nodeHosts) under a header, otherwise localhost, the
// pod's addresses with its hostname (and FQDN), then the pod's
// hostAliases. An invalid hostname is an error, as for the kubelet, even
// where the file does not show it.
func HostsFile(pod *v1.Pod, podIPs []string, clusterDomain string, nodeHosts []byte) ([]byte, error) {
	host, domain, err := PodHostnameAndDomain(pod, clusterDomain)
	if err != nil {
		return nil, err
	}
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
	return []byte(b.String()), nil
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
