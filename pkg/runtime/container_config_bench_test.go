package runtime

import (
	"context"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// BenchmarkContainerConfig is the generation of one container's CRI config as the worker
// does it for every container it creates: its environment (plain values, a field
// reference, a configMap key, $(VAR) expansion and the service variables of a namespace
// with a few services), its security context, and the translation itself.
func BenchmarkContainerConfig(b *testing.B) {
	user := int64(1000)
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns", UID: "u1", Labels: map[string]string{"app": "web"}},
		Spec: v1.PodSpec{Containers: []v1.Container{{Name: "c", Image: "registry.k8s.io/e2e-test-images/agnhost:2.66.1",
			Command: []string{"/agnhost"}, Args: []string{"netexec", "--http-port=$(PORT)"},
			Ports: []v1.ContainerPort{{Name: "http", ContainerPort: 8080}},
			Env: []v1.EnvVar{{Name: "PORT", Value: "8080"}, {Name: "MODE", Value: "fast"},
				{Name: "POD_NAME", ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
				{Name: "LEVEL", ValueFrom: &v1.EnvVarSource{ConfigMapKeyRef: &v1.ConfigMapKeySelector{
					LocalObjectReference: v1.LocalObjectReference{Name: "cfg"}, Key: "level"}}}},
			SecurityContext: &v1.SecurityContext{RunAsUser: &user}}}}}
	src := &fakeEnvSource{
		configMaps: map[string]*v1.ConfigMap{"ns/cfg": {Data: map[string]string{"level": "3"}}},
		services: map[string][]*v1.Service{
			"ns":      {svc("ns", "db", "10.96.0.20", v1.ServicePort{Name: "sql", Port: 5432, Protocol: v1.ProtocolTCP})},
			"default": {svc("default", "kubernetes", "10.96.0.1", v1.ServicePort{Name: "https", Port: 443, Protocol: v1.ProtocolTCP})},
		},
	}
	c := &pod.Spec.Containers[0]
	ctx := context.Background()
	in := EnvInputs{Source: src, PodIPs: []string{"10.244.0.7"}, HostIPs: []string{"10.254.254.1"}}
	b.ReportAllocs()
	for b.Loop() {
		env, err := ResolveEnv(ctx, pod, c, in)
		if err != nil {
			b.Fatal(err)
		}
		vars := env.Map()
		sec, err := ContainerSecurity(pod, c, SecurityOptions{}, ImageUser{})
		if err != nil {
			b.Fatal(err)
		}
		cfg := ContainerConfig(pod, c, ContainerInputs{Image: "sha256:abc", RestartCount: 2, Env: env.Vars, Security: sec,
			Command: ExpandCommand(c.Command, vars), Args: ExpandCommand(c.Args, vars)})
		if cfg.Args[1] != "--http-port=8080" {
			b.Fatal(cfg.Args)
		}
	}
}
