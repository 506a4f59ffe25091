package admission

import (
	v1 "k8s.io/api/core/v1"
)

// wildcardIP is a host port bound on every address.
const wildcardIP = "0.0.0.0"

type hostPort struct {
	ip       string
	protocol v1.Protocol
	port     int32
}

// hostPorts lists the host ports the pod's containers (and sidecars) bind.
func hostPorts(pod *v1.Pod) []hostPort {
	var out []hostPort
	add := func(cs []v1.Container, sidecarsOnly bool) {
		for _, c := range cs {
			if sidecarsOnly && (c.RestartPolicy == nil || *c.RestartPolicy != v1.ContainerRestartPolicyAlways) {
				continue
			}
			for _, p := range c.Ports {
				if p.HostPort <= 0 {
					continue
				}
				ip := p.HostIP
				if ip == "" {
					ip = wildcardIP
				}
				proto := p.Protocol
				if proto == "" {
					proto = v1.ProtocolTCP
				}
				out = append(out, hostPort{ip: ip, protocol: proto, port: p.HostPort})
			}
		}
	}
	add(pod.Spec.InitContainers, true)
	add(pod.Spec.Containers, false)
	return out
}

// conflicts: same port and protocol on the same address, or on any
// address when either binds them all.
func (a hostPort) conflicts(b hostPort) bool {
	return a.port == b.port && a.protocol == b.protocol && (a.ip == b.ip || a.ip == wildcardIP || b.ip == wildcardIP)
}

// fitHostPorts rejects a pod wanting a host port an admitted pod has.
func fitHostPorts(pod *v1.Pod, admitted []*v1.Pod) Result {
	want := hostPorts(pod)
	if len(want) == 0 {
		return Result{Admit: true}
	}
	for _, other := range admitted {
		for _, have := range hostPorts(other) {
			for _, w := range want {
				if w.conflicts(have) {
					return predicateFailed(ReasonNodePorts, descNodePorts)
				}
			}
		}
	}
	return Result{Admit: true}
}
