package admission

import (
	"fmt"
	"strings"

	v1 "k8s.io/api/core/v1"
	utilsysctl "k8s.io/component-helpers/node/util/sysctl"
)

// safeSysctl is a sysctl every pod may set: namespaced and unable to
// affect other pods, from the kernel release that namespaces it.
type safeSysctl struct {
	name, kernel string
}

// The kubelet's safe sysctls.
var safeSysctlList = []safeSysctl{
	{name: "kernel.shm_rmid_forced"},
	{name: "net.ipv4.ip_local_port_range"},
	{name: "net.ipv4.tcp_syncookies"},
	{name: "net.ipv4.ping_group_range"},
	{name: "net.ipv4.ip_unprivileged_port_start"},
	{name: "net.ipv4.ip_local_reserved_ports", kernel: "3.16"},
	{name: "net.ipv4.tcp_keepalive_time", kernel: "4.5"},
	{name: "net.ipv4.tcp_fin_timeout", kernel: "4.6"},
	{name: "net.ipv4.tcp_keepalive_intvl", kernel: "4.5"},
	{name: "net.ipv4.tcp_keepalive_probes", kernel: "4.5"},
	{name: "net.ipv4.tcp_rmem", kernel: "4.15"},
	{name: "net.ipv4.tcp_wmem", kernel: "4.15"},
	{name: "net.ipv4.tcp_slow_start_after_idle", kernel: "4.15"},
	{name: "net.ipv4.tcp_notsent_lowat", kernel: "4.6"},
}

// safeSysctls are the safe sysctls the kernel namespaces.
func safeSysctls(kernel string) []string {
	var out []string
	for _, s := range safeSysctlList {
		if s.kernel == "" || kernel == "" || kernelAtLeast(kernel, s.kernel) {
			out = append(out, s.name)
		}
	}
	return out
}

// allowlist is the sysctls pods may set, each with the namespace it
// lives in: a pod sharing that namespace with the host may not set it.
type allowlist struct {
	names    map[string]utilsysctl.Namespace
	prefixes map[string]utilsysctl.Namespace
}

func newAllowlist(safe, unsafe []string) (*allowlist, error) {
	al := &allowlist{names: map[string]utilsysctl.Namespace{}, prefixes: map[string]utilsysctl.Namespace{}}
	for _, s := range append(append([]string(nil), safe...), unsafe...) {
		ns, nameOrPrefix, prefixed := utilsysctl.GetNamespace(s)
		if ns == utilsysctl.UnknownNamespace {
			return nil, fmt.Errorf("admission: the sysctls %q are not known to be namespaced", nameOrPrefix)
		}
		if prefixed {
			al.prefixes[nameOrPrefix] = ns
		} else {
			al.names[nameOrPrefix] = ns
		}
	}
	return al, nil
}

func (al *allowlist) admit(pod *v1.Pod) Result {
	sc := pod.Spec.SecurityContext
	if sc == nil {
		return Result{Admit: true}
	}
	hostUsers := pod.Spec.HostUsers == nil || *pod.Spec.HostUsers
	for _, s := range sc.Sysctls {
		if err := al.check(s.Name, pod.Spec.HostNetwork, pod.Spec.HostIPC, hostUsers); err != nil {
			return reject(ReasonSysctlForbidden, fmt.Sprintf("forbidden sysctl: %v", err))
		}
	}
	return Result{Admit: true}
}

func (al *allowlist) check(name string, hostNet, hostIPC, hostUsers bool) error {
	name = utilsysctl.NormalizeName(name)
	ns, ok := al.names[name]
	if !ok {
		for p, pns := range al.prefixes {
			if strings.HasPrefix(name, p) {
				ns, ok = pns, true
				break
			}
		}
	}
	if !ok {
		return fmt.Errorf("%q not allowlisted", name)
	}
	shared := (ns == utilsysctl.IPCNamespace && hostIPC) || (ns == utilsysctl.NetNamespace && hostNet) ||
		(ns == utilsysctl.UserNamespace && hostUsers)
	if shared {
		return fmt.Errorf("%q not allowed with host %s enabled", name, ns)
	}
	return nil
}
