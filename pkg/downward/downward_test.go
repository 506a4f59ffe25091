package downward

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func q(s string) resource.Quantity { return resource.MustParse(s) }

// basePod is the pod every case starts from; mutators change it.
func basePod() *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns", UID: "uid-1",
			Labels:      map[string]string{"tier": "front", "app": "web"},
			Annotations: map[string]string{"a/b": "c", "note": "a \"quoted\"\nvalue", "Example.com/Key": "up"}},
		Spec: v1.PodSpec{
			NodeName: "node1", ServiceAccountName: "sa",
			InitContainers: []v1.Container{{Name: "init"}},
			Containers: []v1.Container{
				{Name: "c", Resources: v1.ResourceRequirements{
					Requests: v1.ResourceList{v1.ResourceCPU: q("250m"), v1.ResourceMemory: q("64Mi"), "hugepages-2Mi": q("4Mi")},
					Limits:   v1.ResourceList{v1.ResourceMemory: q("128Mi"), "hugepages-2Mi": q("4Mi")},
				}},
				{Name: "side", Resources: v1.ResourceRequirements{Limits: v1.ResourceList{v1.ResourceMemory: q("1Gi")}}},
			},
		},
	}
}

func baseInputs() Inputs {
	return Inputs{
		PodIPs:  []string{"10.1.0.5", "fd01::5"},
		HostIPs: []string{"192.168.0.1", "fd00::1"},
		Allocatable: v1.ResourceList{v1.ResourceCPU: q("4"), v1.ResourceMemory: q("8Gi"),
			v1.ResourceEphemeralStorage: q("100Gi"), "hugepages-2Mi": q("1Gi")},
	}
}

// outcome is a value, or an error containing err.
type outcome struct{ value, err string }

func val(v string) outcome            { return outcome{value: v} }
func fails(e string) outcome          { return outcome{err: e} }
func unsupported(path string) outcome { return fails("unsupported fieldPath: " + path) }

func (o outcome) check(t *testing.T, use string, got string, err error) {
	t.Helper()
	switch {
	case o.err != "" && (err == nil || !strings.Contains(err.Error(), o.err)):
		t.Errorf("%s: got %q, %v; want error %q", use, got, err, o.err)
	case o.err == "" && (err != nil || got != o.value):
		t.Errorf("%s: got %q, %v; want %q", use, got, err, o.value)
	}
}

// TestFieldValue: one table for both uses; env reads more fields than a
// volume file may.
func TestFieldValue(t *testing.T) {
	for _, tc := range []struct {
		name     string
		path     string
		mutate   func(*v1.Pod, *Inputs)
		env, vol outcome
	}{
		{name: "name", path: "metadata.name", env: val("web"), vol: val("web")},
		{name: "namespace", path: "metadata.namespace", env: val("ns"), vol: val("ns")},
		{name: "uid", path: "metadata.uid", env: val("uid-1"), vol: val("uid-1")},
		{name: "labels: sorted key=\"value\" lines", path: "metadata.labels",
			env: val("app=\"web\"\ntier=\"front\""), vol: val("app=\"web\"\ntier=\"front\"")},
		{name: "annotations: values escaped", path: "metadata.annotations",
			env: val("Example.com/Key=\"up\"\na/b=\"c\"\nnote=\"a \\\"quoted\\\"\\nvalue\""),
			vol: val("Example.com/Key=\"up\"\na/b=\"c\"\nnote=\"a \\\"quoted\\\"\\nvalue\"")},
		{name: "no labels", path: "metadata.labels", mutate: func(p *v1.Pod, _ *Inputs) { p.Labels = nil },
			env: val(""), vol: val("")},
		{name: "one label", path: "metadata.labels['tier']", env: val("front"), vol: val("front")},
		{name: "absent label", path: "metadata.labels['none']", env: val(""), vol: val("")},
		{name: "one annotation", path: "metadata.annotations['a/b']", env: val("c"), vol: val("c")},
		{name: "annotation keys checked case-insensitively", path: "metadata.annotations['Example.com/Key']", env: val("up"), vol: val("up")},
		{name: "label key that cannot be", path: "metadata.labels['bad key']",
			env: fails("invalid key subscript in metadata.labels['bad key']"), vol: fails("invalid key subscript")},
		{name: "empty key", path: "metadata.labels['']", env: fails("invalid key subscript"), vol: fails("invalid key subscript")},
		{name: "subscript of another field", path: "spec.nodeName['x']",
			env: fails(`fieldPath "spec.nodeName['x']" does not support subscript`), vol: fails("does not support subscript")},
		{name: "node name", path: "spec.nodeName", env: val("node1"), vol: unsupported("spec.nodeName")},
		{name: "node name by its old name", path: "spec.host", env: val("node1"), vol: unsupported("spec.host")},
		{name: "service account", path: "spec.serviceAccountName", env: val("sa"), vol: unsupported("spec.serviceAccountName")},
		{name: "pod IP", path: "status.podIP", env: val("10.1.0.5"), vol: unsupported("status.podIP")},
		{name: "pod IPs", path: "status.podIPs", env: val("10.1.0.5,fd01::5"), vol: unsupported("status.podIPs")},
		{name: "no pod IP yet", path: "status.podIP", mutate: func(_ *v1.Pod, in *Inputs) { in.PodIPs = nil },
			env: val(""), vol: unsupported("status.podIP")},
		{name: "host IP", path: "status.hostIP", env: val("192.168.0.1"), vol: unsupported("status.hostIP")},
		{name: "host IPs", path: "status.hostIPs", env: val("192.168.0.1,fd00::1"), vol: unsupported("status.hostIPs")},
		{name: "node without address", path: "status.hostIP", mutate: func(_ *v1.Pod, in *Inputs) { in.HostIPs = nil },
			env: fails("node has no IP address to report as status.hostIP"), vol: unsupported("status.hostIP")},
		{name: "unknown field", path: "spec.hostname", env: unsupported("spec.hostname"), vol: unsupported("spec.hostname")},
		{name: "phase is not readable", path: "status.phase", env: unsupported("status.phase"), vol: unsupported("status.phase")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod, in := basePod(), baseInputs()
			if tc.mutate != nil {
				tc.mutate(pod, &in)
			}
			sel := &v1.ObjectFieldSelector{APIVersion: "v1", FieldPath: tc.path}
			got, err := FieldValue(pod, sel, Env, in)
			tc.env.check(t, "env", got, err)
			got, err = FieldValue(pod, sel, Volume, in)
			tc.vol.check(t, "volume", got, err)
		})
	}
}

// TestResourceValue: one table for both uses. Env resolves for the pod's
// first container, which a selector without containerName means; a
// volume's selector must name its container.
func TestResourceValue(t *testing.T) {
	ref := func(container, res, divisor string) *v1.ResourceFieldSelector {
		s := &v1.ResourceFieldSelector{ContainerName: container, Resource: res}
		if divisor != "" {
			s.Divisor = q(divisor)
		}
		return s
	}
	podLimits := func(l v1.ResourceList) func(*v1.Pod, *Inputs) {
		return func(p *v1.Pod, _ *Inputs) { p.Spec.Resources = &v1.ResourceRequirements{Limits: l} }
	}
	for _, tc := range []struct {
		name     string
		sel      *v1.ResourceFieldSelector
		mutate   func(*v1.Pod, *Inputs)
		env, vol outcome
	}{
		{name: "cpu request in millicores", sel: ref("c", "requests.cpu", "1m"), env: val("250"), vol: val("250")},
		{name: "cpu request rounds up", sel: ref("c", "requests.cpu", ""), env: val("1"), vol: val("1")},
		{name: "memory request in bytes", sel: ref("c", "requests.memory", ""), env: val("67108864"), vol: val("67108864")},
		{name: "memory limit in Mi", sel: ref("c", "limits.memory", "1Mi"), env: val("128"), vol: val("128")},
		{name: "memory limit in Gi rounds up", sel: ref("c", "limits.memory", "1Gi"), env: val("1"), vol: val("1")},
		{name: "unset request is 0", sel: ref("c", "requests.ephemeral-storage", ""), env: val("0"), vol: val("0")},
		{name: "unset cpu limit: allocatable", sel: ref("c", "limits.cpu", ""), env: val("4"), vol: val("4")},
		{name: "unset cpu limit in millicores", sel: ref("c", "limits.cpu", "1m"), env: val("4000"), vol: val("4000")},
		{name: "zero cpu limit: allocatable", sel: ref("c", "limits.cpu", ""),
			mutate: func(p *v1.Pod, _ *Inputs) { p.Spec.Containers[0].Resources.Limits[v1.ResourceCPU] = q("0") },
			env:    val("4"), vol: val("4")},
		{name: "unset ephemeral-storage limit: allocatable", sel: ref("c", "limits.ephemeral-storage", "1Gi"), env: val("100"), vol: val("100")},
		{name: "unset limit, nothing allocatable", sel: ref("c", "limits.cpu", ""),
			mutate: func(_ *v1.Pod, in *Inputs) { in.Allocatable = nil }, env: val("0"), vol: val("0")},
		{name: "pod-level cpu limit: env reads it, a volume the node's", sel: ref("c", "limits.cpu", "1m"),
			mutate: podLimits(v1.ResourceList{v1.ResourceCPU: q("1500m")}), env: val("1500"), vol: val("4000")},
		{name: "pod-level memory limit", sel: ref("side", "limits.memory", "1Mi"),
			mutate: podLimits(v1.ResourceList{v1.ResourceMemory: q("2Gi")}), env: val("1024"), vol: val("1024")},
		{name: "pod-level memory limit under an unset one", sel: ref("", "limits.memory", "1Mi"),
			mutate: func(p *v1.Pod, in *Inputs) {
				delete(p.Spec.Containers[0].Resources.Limits, v1.ResourceMemory)
				podLimits(v1.ResourceList{v1.ResourceMemory: q("2Gi")})(p, in)
			},
			env: val("2048"), vol: fails("container  not found")},
		{name: "pod-level ephemeral-storage limit is not read", sel: ref("c", "limits.ephemeral-storage", "1Gi"),
			mutate: podLimits(v1.ResourceList{v1.ResourceEphemeralStorage: q("1Gi")}), env: val("100"), vol: val("100")},
		{name: "huge pages request", sel: ref("c", "requests.hugepages-2Mi", "1Mi"), env: val("4"), vol: val("4")},
		{name: "unset huge pages limit is 0, not allocatable", sel: ref("side", "limits.hugepages-2Mi", ""), env: val("0"), vol: val("0")},
		{name: "another container", sel: ref("side", "limits.memory", "1Mi"), env: val("1024"), vol: val("1024")},
		{name: "an init container", sel: ref("init", "limits.cpu", ""), env: val("4"), vol: val("4")},
		{name: "no container named: the asking one", sel: ref("", "requests.cpu", "1m"), env: val("250"), vol: fails("container  not found")},
		{name: "unknown container", sel: ref("nope", "limits.cpu", ""), env: fails("container nope not found"), vol: fails("container nope not found")},
		{name: "no kind", sel: ref("c", "cpu", ""),
			env: fails("unsupported container resource : cpu"), vol: fails("unsupported container resource : cpu")},
		{name: "pods are not a container resource", sel: ref("c", "limits.pods", ""),
			env: fails("unsupported container resource : limits.pods"), vol: fails("unsupported container resource : limits.pods")},
		{name: "extended resource", sel: ref("c", "limits.example.com/gpu", ""),
			env: fails("unsupported container resource"), vol: fails("unsupported container resource")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod, in := basePod(), baseInputs()
			if tc.mutate != nil {
				tc.mutate(pod, &in)
			}
			got, err := ResourceValue(pod, &pod.Spec.Containers[0], tc.sel, Env, in)
			tc.env.check(t, "env", got, err)
			got, err = ResourceValue(pod, nil, tc.sel, Volume, in)
			tc.vol.check(t, "volume", got, err)
		})
	}
}
