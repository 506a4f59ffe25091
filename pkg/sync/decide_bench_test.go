package sync

import (
	"reflect"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nodeagent/nodeagent/pkg/allocation"
	"github.com/nodeagent/nodeagent/pkg/probe"
	"github.com/nodeagent/nodeagent/pkg/runtime"
	"github.com/nodeagent/nodeagent/pkg/status"
)

// typical makes basePod's two containers what a deployment's pod holds once the
// apiserver has filled its defaults: a command, an environment, resources, probes, the
// service account's projected volume.
func typical(p *v1.Pod) {
	p.Labels = map[string]string{"app": "web", "pod-template-hash": "5d4f8b7c9"}
	grace, expiry, seconds := int64(30), int64(3607), int64(300)
	enableLinks, preempt := true, v1.PreemptLowerPriority
	p.Spec.TerminationGracePeriodSeconds, p.Spec.EnableServiceLinks, p.Spec.PreemptionPolicy = &grace, &enableLinks, &preempt
	p.Spec.DNSPolicy, p.Spec.SchedulerName, p.Spec.ServiceAccountName, p.Spec.NodeName = v1.DNSClusterFirst, "default-scheduler", "default", "node-1"
	p.Spec.SecurityContext = &v1.PodSecurityContext{}
	p.Spec.Tolerations = []v1.Toleration{
		{Key: "node.kubernetes.io/not-ready", Operator: v1.TolerationOpExists, Effect: v1.TaintEffectNoExecute, TolerationSeconds: &seconds},
		{Key: "node.kubernetes.io/unreachable", Operator: v1.TolerationOpExists, Effect: v1.TaintEffectNoExecute, TolerationSeconds: &seconds},
	}
	p.Spec.Volumes = []v1.Volume{{Name: "kube-api-access-x7k2p", VolumeSource: v1.VolumeSource{Projected: &v1.ProjectedVolumeSource{
		Sources: []v1.VolumeProjection{
			{ServiceAccountToken: &v1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: &expiry}},
			{ConfigMap: &v1.ConfigMapProjection{LocalObjectReference: v1.LocalObjectReference{Name: "kube-root-ca.crt"},
				Items: []v1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}}},
			{DownwardAPI: &v1.DownwardAPIProjection{Items: []v1.DownwardAPIVolumeFile{
				{Path: "namespace", FieldRef: &v1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.namespace"}}}}},
		}}}}}
	for i := range p.Spec.Containers {
		c := &p.Spec.Containers[i]
		c.Command, c.Args = []string{"sh", "-c"}, []string{"exec httpd -f -p 8080"}
		c.Ports = []v1.ContainerPort{{Name: "http", ContainerPort: 8080, Protocol: v1.ProtocolTCP}}
		c.Env = []v1.EnvVar{{Name: "MODE", Value: "production"},
			{Name: "POD_NAME", ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.name"}}}}
		c.Resources = v1.ResourceRequirements{
			Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse("100m"), v1.ResourceMemory: resource.MustParse("64Mi")},
			Limits:   v1.ResourceList{v1.ResourceMemory: resource.MustParse("128Mi")},
		}
		handler := v1.ProbeHandler{HTTPGet: &v1.HTTPGetAction{Path: "/", Port: intstr.FromString("http"), Scheme: v1.URISchemeHTTP}}
		c.LivenessProbe = &v1.Probe{ProbeHandler: handler, PeriodSeconds: 10, TimeoutSeconds: 1, SuccessThreshold: 1, FailureThreshold: 3}
		c.ReadinessProbe = &v1.Probe{ProbeHandler: handler, PeriodSeconds: 5, TimeoutSeconds: 1, SuccessThreshold: 1, FailureThreshold: 3}
		c.VolumeMounts = []v1.VolumeMount{{Name: "kube-api-access-x7k2p", ReadOnly: true, MountPath: "/var/run/secrets/kubernetes.io/serviceaccount"}}
		c.TerminationMessagePath, c.TerminationMessagePolicy = v1.TerminationMessagePathDefault, v1.TerminationMessageReadFile
		c.ImagePullPolicy = v1.PullIfNotPresent
	}
}

// runningInput is what a worker's pass knows of a typical pod that has run for an hour
// and that nothing has changed since: every container running in the sandbox, with the
// hash of its spec on it as the runtime's labels carry it, its probes passing, and its
// resources applied as allocated.
func runningInput() input {
	pod := basePod(typical)
	var seen []*runtime.ContainerStatus
	probes := probeResults{}
	for i := range pod.Spec.Containers {
		c := running(pod.Spec.Containers[i].Name)
		c.Hash = runtime.ContainerHash(&pod.Spec.Containers[i])
		seen = append(seen, c)
		probes[c.ID] = probe.Results{Liveness: probe.Success, Readiness: probe.Success}
	}
	return input{
		pod: pod, observed: obs(seen...), probes: probes, actuated: allocation.FromSpec(pod),
		now: t0.Add(time.Hour), resync: DefaultResyncPeriod,
	}
}

// BenchmarkDecideRunningPod is decide on a running pod where nothing changed, which
// finds nothing to do: the work of every pod's pass, every resync period or wake-up.
func BenchmarkDecideRunningPod(b *testing.B) {
	in := runningInput()
	// The state advance leaves after a pass that did nothing.
	st := podState{waiting: map[string]status.Waiting{}}
	nothing := podActions{SandboxID: "sb", NextInit: -1}
	check := func(s step) {
		b.Helper()
		if s.kind != stepSync || !reflect.DeepEqual(s.plan, nothing) || len(s.holds) != 0 || s.pullsHeld != nil || s.wait != DefaultResyncPeriod {
			b.Fatalf("step = %+v, want a sync with nothing to do", s)
		}
	}
	check(decide(&st, in))
	b.ReportAllocs()
	var s step
	for b.Loop() {
		s = decide(&st, in)
	}
	check(s)
}
