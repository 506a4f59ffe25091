package admission

import (
	goruntime "runtime"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
)

func rl(kv ...string) v1.ResourceList {
	out := v1.ResourceList{}
	for i := 0; i+1 < len(kv); i += 2 {
		out[v1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
	}
	return out
}

func baseNode() *v1.Node {
	return &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{
			v1.LabelHostname: "n1", v1.LabelOSStable: goruntime.GOOS, "disk": "ssd"}},
		Status: v1.NodeStatus{Allocatable: rl("cpu", "1900m", "memory", "2Gi", "pods", "3",
			"ephemeral-storage", "10Gi", "hugepages-2Mi", "0", "example.com/gpu", "1")},
	}
}

func podReq(name string, req v1.ResourceList) *v1.Pod {
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: "uid-" + "name"},
		Spec: v1.PodSpec{NodeName: "n1", Containers: []v1.Container{{Name: "c", Resources: v1.ResourceRequirements{Requests: req}}}}}
}

func TestAdmit(t *testing.T) {
	a, err := New(Config{AllowedUnsafeSysctls: []string{"net.core.somaxconn", "kernel.msg*"}, KernelVersion: "6.18.44-fc"})
	if err != nil {
		t.Fatal(err)
	}
	running := []*v1.Pod{podReq("a", rl("cpu", "100m", "memory", "1Gi"))}
	tests := []struct {
		name       string
		pod        *v1.Pod
		mutate     func(*v1.Pod)
		node       func(*v1.Node)
		admitted   []*v1.Pod
		wantReason string
		wantMsg    string
	}{
		{name: "fits", pod: podReq("p", rl("cpu", "1", "memory", "512Mi")), admitted: running},
		{name: "besteffort always fits resources", pod: podReq("p", nil), admitted: running},
		{name: "too much cpu", pod: podReq("p", rl("cpu", "4")), admitted: running,
			wantReason: "OutOfcpu", wantMsg: "Node didn't have enough resource: cpu, requested: 4000, used: 100, capacity: 1900"},
		{name: "cpu is checked before memory", pod: podReq("p", rl("cpu", "4", "memory", "4Gi")), admitted: running, wantReason: "OutOfcpu"},
		{name: "too much memory given what runs", pod: podReq("p", rl("memory", "1536Mi")), admitted: running,
			wantReason: "OutOfmemory", wantMsg: "Node didn't have enough resource: memory, requested: 1610612736, used: 1073741824, capacity: 2147483648"},
		{name: "too much ephemeral storage", pod: podReq("p", rl("ephemeral-storage", "20Gi")), wantReason: "OutOfephemeral-storage"},
		{name: "huge pages the node lacks", pod: podReq("p", rl("hugepages-2Mi", "2Mi")),
			wantReason: "OutOfhugepages-2Mi", wantMsg: "Node didn't have enough resource: hugepages-2Mi, requested: 2097152, used: 0, capacity: 0"},
		{name: "extended resource taken", pod: podReq("p", rl("example.com/gpu", "1")), admitted: []*v1.Pod{podReq("g", rl("example.com/gpu", "1"))},
			wantReason: "OutOfexample.com/gpu"},
		{name: "extended resource the node does not have is left to its plugin", pod: podReq("p", rl("other.io/fpga", "1"))},
		{name: "too many pods", pod: podReq("p", nil), admitted: []*v1.Pod{podReq("a", nil), podReq("b", nil), podReq("c", nil)},
			wantReason: "OutOfpods", wantMsg: "Node didn't have enough resource: pods, requested: 1, used: 3, capacity: 3"},
		{name: "init container peak counts", pod: podReq("p", rl("cpu", "100m")), mutate: func(p *v1.Pod) {
			p.Spec.InitContainers = []v1.Container{{Name: "i", Resources: v1.ResourceRequirements{Requests: rl("cpu", "2")}}}
		}, wantReason: "OutOfcpu"},
		{name: "node selector matches", pod: podReq("p", nil), mutate: func(p *v1.Pod) { p.Spec.NodeSelector = map[string]string{"disk": "ssd"} }},
		{name: "node selector does not match", pod: podReq("p", nil), mutate: func(p *v1.Pod) { p.Spec.NodeSelector = map[string]string{"disk": "hdd"} },
			wantReason: "NodeAffinity", wantMsg: "Predicate NodeAffinity failed: node(s) didn't match Pod's node affinity/selector"},
		{name: "required node affinity does not match", pod: podReq("p", nil), mutate: func(p *v1.Pod) {
			p.Spec.Affinity = &v1.Affinity{NodeAffinity: &v1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &v1.NodeSelector{
				NodeSelectorTerms: []v1.NodeSelectorTerm{{MatchExpressions: []v1.NodeSelectorRequirement{{Key: "zone", Operator: v1.NodeSelectorOpExists}}}}}}}
		}, wantReason: "NodeAffinity"},
		{name: "resources are reported before affinity", pod: podReq("p", rl("cpu", "4")), mutate: func(p *v1.Pod) {
			p.Spec.NodeSelector = map[string]string{"disk": "hdd"}
		}, wantReason: "OutOfcpu"},
		{name: "another node's pod", pod: podReq("p", nil), mutate: func(p *v1.Pod) { p.Spec.NodeName = "n2" },
			wantReason: "NodeName", wantMsg: "Predicate NodeName failed: node(s) didn't match the requested node name"},
		{name: "NoExecute taint not tolerated", pod: podReq("p", nil), node: func(n *v1.Node) {
			n.Spec.Taints = []v1.Taint{{Key: "dedicated", Value: "db", Effect: v1.TaintEffectNoExecute}}
		}, wantReason: "TaintToleration", wantMsg: "Predicate TaintToleration failed: node(s) had taints that the pod didn't tolerate"},
		{name: "NoExecute taint tolerated", pod: podReq("p", nil), mutate: func(p *v1.Pod) {
			p.Spec.Tolerations = []v1.Toleration{{Key: "dedicated", Operator: v1.TolerationOpEqual, Value: "db", Effect: v1.TaintEffectNoExecute}}
		}, node: func(n *v1.Node) {
			n.Spec.Taints = []v1.Taint{{Key: "dedicated", Value: "db", Effect: v1.TaintEffectNoExecute}}
		}},
		{name: "NoSchedule taint is the scheduler's business", pod: podReq("p", nil), node: func(n *v1.Node) {
			n.Spec.Taints = []v1.Taint{{Key: "dedicated", Value: "db", Effect: v1.TaintEffectNoSchedule}}
		}},
		{name: "static pods ignore taints", pod: podReq("p", nil), mutate: func(p *v1.Pod) {
			p.Annotations = map[string]string{"kubernetes.io/config.source": "file"}
		}, node: func(n *v1.Node) {
			n.Spec.Taints = []v1.Taint{{Key: "dedicated", Effect: v1.TaintEffectNoExecute}}
		}},
		{name: "static pods are critical: not refused for resources", pod: podReq("p", rl("cpu", "4")), admitted: running, mutate: func(p *v1.Pod) {
			p.Annotations = map[string]string{"kubernetes.io/config.source": "file"}
		}},
		{name: "static pods take a pod slot beyond maxPods", pod: podReq("p", nil), admitted: []*v1.Pod{podReq("a", nil), podReq("b", nil), podReq("c", nil)},
			mutate: func(p *v1.Pod) { p.Annotations = map[string]string{"kubernetes.io/config.source": "file"} }},
		{name: "system-critical priority is critical", pod: podReq("p", rl("memory", "4Gi")), mutate: func(p *v1.Pod) {
			prio := int32(2000001000)
			p.Spec.Priority = &prio
		}},
		{name: "high but not critical priority is refused", pod: podReq("p", rl("memory", "4Gi")), mutate: func(p *v1.Pod) {
			prio := int32(1999999999)
			p.Spec.Priority = &prio
		}, wantReason: "OutOfmemory"},
		{name: "critical pods still meet the other checks", pod: podReq("p", rl("cpu", "4")), mutate: func(p *v1.Pod) {
			p.Annotations = map[string]string{"kubernetes.io/config.mirror": "abc"}
			p.Spec.NodeSelector = map[string]string{"disk": "hdd"}
		}, wantReason: "NodeAffinity"},
		{name: "host port taken", pod: withPort(podReq("p", nil), "", 8080), admitted: []*v1.Pod{withPort(podReq("a", nil), "10.0.0.1", 8080)},
			wantReason: "NodePorts", wantMsg: "Predicate NodePorts failed: node(s) didn't have free ports for the requested pod ports"},
		{name: "host port on another address", pod: withPort(podReq("p", nil), "10.0.0.2", 8080), admitted: []*v1.Pod{withPort(podReq("a", nil), "10.0.0.1", 8080)}},
		{name: "safe sysctl", pod: withSysctl(podReq("p", nil), "net.ipv4.tcp_keepalive_time")},
		{name: "allowed unsafe sysctl", pod: withSysctl(podReq("p", nil), "net.core.somaxconn")},
		{name: "allowed unsafe prefix, slashes", pod: withSysctl(podReq("p", nil), "kernel/msgmax")},
		{name: "any sysctl under an allowed prefix", pod: withSysctl(podReq("p", nil), "kernel.msgmnb")},
		{name: "forbidden sysctl", pod: withSysctl(podReq("p", nil), "net.ipv4.ip_forward"),
			wantReason: "SysctlForbidden", wantMsg: `forbidden sysctl: "net.ipv4.ip_forward" not allowlisted`},
		{name: "net sysctl with host network", pod: withSysctl(podReq("p", nil), "net.core.somaxconn"), mutate: func(p *v1.Pod) { p.Spec.HostNetwork = true },
			wantReason: "SysctlForbidden", wantMsg: `forbidden sysctl: "net.core.somaxconn" not allowed with host Net enabled`},
		{name: "sysctls are checked first", pod: withSysctl(podReq("p", rl("cpu", "4")), "vm.swappiness"), wantReason: "SysctlForbidden"},
		{name: "os label mismatch", pod: podReq("p", nil), mutate: func(p *v1.Pod) { p.Labels = map[string]string{v1.LabelOSStable: "windows"} },
			wantReason: "PodOSSelectorNodeLabelDoesNotMatch", wantMsg: "Failed to admit pod as the `kubernetes.io/os` label doesn't match node label"},
		{name: "os field mismatch", pod: podReq("p", nil), mutate: func(p *v1.Pod) { p.Spec.OS = &v1.PodOS{Name: "windows"} },
			wantReason: "PodOSNotSupported", wantMsg: "Failed to admit pod as the OS field doesn't match node OS"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.mutate != nil {
				tt.mutate(tt.pod)
			}
			n := baseNode()
			if tt.node != nil {
				tt.node(n)
			}
			r := a.Admit(klog.Background(), tt.pod, n, tt.admitted)
			if r.Admit != (tt.wantReason == "") || r.Reason != tt.wantReason {
				t.Fatalf("Admit = %+v, want reason %q", r, tt.wantReason)
			}
			if tt.wantMsg != "" && r.Message != tt.wantMsg {
				t.Errorf("message = %q\nwant      %q", r.Message, tt.wantMsg)
			}
		})
	}
}

func withPort(p *v1.Pod, ip string, port int32) *v1.Pod {
	p.Spec.Containers[0].Ports = []v1.ContainerPort{{ContainerPort: 80, HostPort: port, HostIP: ip}}
	return p
}

func withSysctl(p *v1.Pod, name string) *v1.Pod {
	p.Spec.SecurityContext = &v1.PodSecurityContext{Sysctls: []v1.Sysctl{{Name: name, Value: "1"}}}
	return p
}

func TestAdmitWithoutNode(t *testing.T) {
	a, _ := New(Config{})
	r := a.Admit(klog.Background(), podReq("p", nil), nil, nil)
	if r.Admit || r.Reason != "InvalidNodeInfo" {
		t.Errorf("Admit without a node = %+v", r)
	}
	if got := (Result{Message: "x"}).StatusMessage(); got != "Pod was rejected: x" {
		t.Errorf("StatusMessage = %q", got)
	}
}

func TestNewRejectsUnknownSysctls(t *testing.T) {
	if _, err := New(Config{AllowedUnsafeSysctls: []string{"vm.swappiness"}}); err == nil {
		t.Error("a non-namespaced sysctl was accepted in allowedUnsafeSysctls")
	}
}

func TestSafeSysctlsFollowTheKernel(t *testing.T) {
	old := safeSysctls("4.4.0")
	for _, s := range old {
		if s == "net.ipv4.tcp_keepalive_time" {
			t.Errorf("a 4.4 kernel got %s, namespaced from 4.5", s)
		}
	}
	if len(safeSysctls("6.1")) != len(safeSysctlList) {
		t.Errorf("a recent kernel lacks safe sysctls")
	}
}

// One Admitter judges pod after pod against the pods admitted so far, keeping their
// requests between judgments: a pod resized (a new object with other requests) counts with
// its new requests, and a pod no longer admitted no longer counts.
func TestAdmitCountsAdmittedPodsAsTheyAreNow(t *testing.T) {
	a, err := New(Config{KernelVersion: "6.18.44-fc"})
	if err != nil {
		t.Fatal(err)
	}
	logger := klog.Background()
	small := podReq("small", rl("cpu", "500m"))
	other := podReq("other", rl("cpu", "500m"))
	pod := podReq("p", rl("cpu", "900m"))
	if r := a.Admit(logger, pod, baseNode(), []*v1.Pod{small, other}); !r.Admit {
		t.Fatalf("900m beside 1 cpu of 1.9 refused: %+v", r)
	}
	// The same pods again, one of them now allocated more: a new object.
	grown := small.DeepCopy()
	grown.Spec.Containers[0].Resources.Requests = rl("cpu", "1")
	r := a.Admit(logger, pod, baseNode(), []*v1.Pod{grown, other})
	if r.Reason != "OutOfcpu" || r.Message != "Node didn't have enough resource: cpu, requested: 900, used: 1500, capacity: 1900" {
		t.Fatalf("after the resize: %+v, want OutOfcpu with 1500 used", r)
	}
	// other has ended: only grown counts.
	if r := a.Admit(logger, pod, baseNode(), []*v1.Pod{grown}); !r.Admit {
		t.Fatalf("900m beside 1 cpu of 1.9 refused once other ended: %+v", r)
	}
	if got := len(a.requests.pods); got != 1 {
		t.Errorf("%d pods' requests kept, want the 1 admitted", got)
	}
}
