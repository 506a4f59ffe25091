package runtime

import (
	"context"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

type fakeEnvSource struct {
	notSynced  bool
	configMaps map[string]*v1.ConfigMap
	secrets    map[string]*v1.Secret
	services   map[string][]*v1.Service
}

func (f *fakeEnvSource) GetConfigMap(_ context.Context, ns, name string) (*v1.ConfigMap, error) {
	if cm, ok := f.configMaps[ns+"/"+name]; ok {
		return cm, nil
	}
	return nil, apierrors.NewNotFound(v1.Resource("configmaps"), name)
}

func (f *fakeEnvSource) GetSecret(_ context.Context, ns, name string) (*v1.Secret, error) {
	if s, ok := f.secrets[ns+"/"+name]; ok {
		return s, nil
	}
	return nil, apierrors.NewNotFound(v1.Resource("secrets"), name)
}

func (f *fakeEnvSource) ListServices(_ context.Context, ns string) ([]*v1.Service, error) {
	if f.notSynced {
		return nil, ErrServicesNotSynced
	}
	return f.services[ns], nil
}

func svc(ns, name, ip string, ports ...v1.ServicePort) *v1.Service {
	return &v1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: v1.ServiceSpec{ClusterIP: ip, Ports: ports}}
}

func envPod() *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns", UID: "uid-1",
			Labels: map[string]string{"app": "web"}, Annotations: map[string]string{"a/b": "c"}},
		Spec: v1.PodSpec{NodeName: "node1", ServiceAccountName: "sa", EnableServiceLinks: ptr.To(false),
			Containers: []v1.Container{{Name: "c"}}},
	}
}

func envSource() *fakeEnvSource {
	return &fakeEnvSource{
		configMaps: map[string]*v1.ConfigMap{
			"ns/cfg": {Data: map[string]string{"k": "v", "other": "o", "bad key": "x", "1digit": "y", "a=b": "z"}},
		},
		secrets: map[string]*v1.Secret{
			"ns/sec": {Data: map[string][]byte{"pw": []byte("hunter2"), "USER": []byte("root")}},
		},
		services: map[string][]*v1.Service{
			"default": {svc("default", "kubernetes", "10.96.0.1", v1.ServicePort{Name: "https", Port: 443, Protocol: v1.ProtocolTCP}),
				svc("default", "other", "10.96.0.9", v1.ServicePort{Port: 1})},
			"ns": {svc("ns", "my-svc", "10.96.0.10", v1.ServicePort{Port: 80}, v1.ServicePort{Name: "dns-udp", Port: 53, Protocol: v1.ProtocolUDP}),
				svc("ns", "headless", "None", v1.ServicePort{Port: 80})},
		},
	}
}

func fieldEnv(name, path string) v1.EnvVar {
	return v1.EnvVar{Name: name, ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: path}}}
}

func TestResolveEnv(t *testing.T) {
	kubeVars := map[string]string{
		"KUBERNETES_SERVICE_HOST":       "10.96.0.1",
		"KUBERNETES_SERVICE_PORT":       "443",
		"KUBERNETES_SERVICE_PORT_HTTPS": "443",
		"KUBERNETES_PORT":               "tcp://10.96.0.1:443",
		"KUBERNETES_PORT_443_TCP":       "tcp://10.96.0.1:443",
		"KUBERNETES_PORT_443_TCP_PROTO": "tcp",
		"KUBERNETES_PORT_443_TCP_PORT":  "443",
		"KUBERNETES_PORT_443_TCP_ADDR":  "10.96.0.1",
	}
	withKube := func(m map[string]string) map[string]string {
		out := map[string]string{}
		for k, v := range kubeVars {
			out[k] = v
		}
		for k, v := range m {
			out[k] = v
		}
		return out
	}
	cpu := func(s string) resource.Quantity { return resource.MustParse(s) }
	for _, tc := range []struct {
		name    string
		mutate  func(*v1.Pod, *fakeEnvSource)
		want    map[string]string // the whole environment
		order   []string          // a prefix of the environment's keys, when order matters
		wantErr string
		warn    string
	}{
		{
			name: "plain values and expansion",
			mutate: func(p *v1.Pod, _ *fakeEnvSource) {
				p.Spec.Containers[0].Env = []v1.EnvVar{
					{Name: "A", Value: "a"}, {Name: "B", Value: "$(A)-$(KUBERNETES_SERVICE_HOST)-$(C)-$$(A)"},
					{Name: "C", Value: "c"}, {Name: "EMPTY"},
				}
			},
			want:  withKube(map[string]string{"A": "a", "B": "a-10.96.0.1-$(C)-$(A)", "C": "c", "EMPTY": ""}),
			order: []string{"A", "B", "C", "EMPTY"},
		},
		{
			name: "field refs",
			mutate: func(p *v1.Pod, _ *fakeEnvSource) {
				p.Spec.Containers[0].Env = []v1.EnvVar{
					fieldEnv("NAME", "metadata.name"), fieldEnv("NS", "metadata.namespace"), fieldEnv("UID", "metadata.uid"),
					fieldEnv("APP", "metadata.labels['app']"), fieldEnv("ANN", "metadata.annotations['a/b']"),
					fieldEnv("NONE", "metadata.labels['none']"),
					fieldEnv("NODE", "spec.nodeName"), fieldEnv("SA", "spec.serviceAccountName"),
					fieldEnv("HOST_IP", "status.hostIP"), fieldEnv("HOST_IPS", "status.hostIPs"),
					fieldEnv("POD_IP", "status.podIP"), fieldEnv("POD_IPS", "status.podIPs"),
					fieldEnv("LABELS", "metadata.labels"),
				}
			},
			want: withKube(map[string]string{"NAME": "web", "NS": "ns", "UID": "uid-1", "APP": "web", "ANN": "c", "NONE": "",
				"NODE": "node1", "SA": "sa", "HOST_IP": "192.168.0.1", "HOST_IPS": "192.168.0.1,fd00::1",
				"POD_IP": "10.1.0.5", "POD_IPS": "10.1.0.5,fd01::5", "LABELS": `app="web"`}),
		},
		{
			name: "unsupported field",
			mutate: func(p *v1.Pod, _ *fakeEnvSource) {
				p.Spec.Containers[0].Env = []v1.EnvVar{fieldEnv("X", "spec.hostname")}
			},
			wantErr: "unsupported fieldPath: spec.hostname",
		},
		{
			name: "resource refs with divisors and allocatable defaults",
			mutate: func(p *v1.Pod, _ *fakeEnvSource) {
				p.Spec.Containers[0].Resources = v1.ResourceRequirements{
					Requests: v1.ResourceList{v1.ResourceCPU: cpu("250m"), v1.ResourceMemory: cpu("64Mi")},
					Limits:   v1.ResourceList{v1.ResourceCPU: cpu("1500m")},
				}
				p.Spec.Containers = append(p.Spec.Containers, v1.Container{Name: "side",
					Resources: v1.ResourceRequirements{Limits: v1.ResourceList{v1.ResourceMemory: cpu("1Gi")}}})
				ref := func(name, res string, div string, ctr string) v1.EnvVar {
					s := &v1.ResourceFieldSelector{Resource: res, ContainerName: ctr}
					if div != "" {
						s.Divisor = cpu(div)
					}
					return v1.EnvVar{Name: name, ValueFrom: &v1.EnvVarSource{ResourceFieldRef: s}}
				}
				p.Spec.Containers[0].Env = []v1.EnvVar{
					ref("CPU_LIMIT", "limits.cpu", "", ""), ref("CPU_LIMIT_M", "limits.cpu", "1m", ""),
					ref("CPU_REQ", "requests.cpu", "", ""), ref("CPU_REQ_M", "requests.cpu", "1m", ""),
					ref("MEM_REQ_MI", "requests.memory", "1Mi", ""), ref("MEM_LIMIT", "limits.memory", "", ""),
					ref("MEM_LIMIT_GI", "limits.memory", "1Gi", ""), ref("SIDE_MEM", "limits.memory", "1Mi", "side"),
					ref("EPH_REQ", "requests.ephemeral-storage", "", ""),
				}
			},
			want: withKube(map[string]string{"CPU_LIMIT": "2", "CPU_LIMIT_M": "1500", "CPU_REQ": "1", "CPU_REQ_M": "250",
				"MEM_REQ_MI": "64", "MEM_LIMIT": "4294967296", "MEM_LIMIT_GI": "4", "SIDE_MEM": "1024", "EPH_REQ": "0"}),
		},
		{
			name: "unsupported resource",
			mutate: func(p *v1.Pod, _ *fakeEnvSource) {
				p.Spec.Containers[0].Env = []v1.EnvVar{{Name: "X", ValueFrom: &v1.EnvVarSource{ResourceFieldRef: &v1.ResourceFieldSelector{Resource: "limits.pods"}}}}
			},
			wantErr: "unsupported container resource : limits.pods",
		},
		{
			name: "configMap and secret keys",
			mutate: func(p *v1.Pod, _ *fakeEnvSource) {
				p.Spec.Containers[0].Env = []v1.EnvVar{
					{Name: "K", ValueFrom: &v1.EnvVarSource{ConfigMapKeyRef: &v1.ConfigMapKeySelector{LocalObjectReference: v1.LocalObjectReference{Name: "cfg"}, Key: "k"}}},
					{Name: "PW", ValueFrom: &v1.EnvVarSource{SecretKeyRef: &v1.SecretKeySelector{LocalObjectReference: v1.LocalObjectReference{Name: "sec"}, Key: "pw"}}},
					{Name: "OPT_KEY", ValueFrom: &v1.EnvVarSource{ConfigMapKeyRef: &v1.ConfigMapKeySelector{LocalObjectReference: v1.LocalObjectReference{Name: "cfg"}, Key: "nope", Optional: ptr.To(true)}}},
					{Name: "OPT_CM", ValueFrom: &v1.EnvVarSource{ConfigMapKeyRef: &v1.ConfigMapKeySelector{LocalObjectReference: v1.LocalObjectReference{Name: "nocfg"}, Key: "k", Optional: ptr.To(true)}}},
					{Name: "OPT_SEC", ValueFrom: &v1.EnvVarSource{SecretKeyRef: &v1.SecretKeySelector{LocalObjectReference: v1.LocalObjectReference{Name: "nosec"}, Key: "k", Optional: ptr.To(true)}}},
				}
			},
			want: withKube(map[string]string{"K": "v", "PW": "hunter2"}),
		},
		{
			name: "missing configMap",
			mutate: func(p *v1.Pod, _ *fakeEnvSource) {
				p.Spec.Containers[0].Env = []v1.EnvVar{{Name: "K", ValueFrom: &v1.EnvVarSource{ConfigMapKeyRef: &v1.ConfigMapKeySelector{LocalObjectReference: v1.LocalObjectReference{Name: "nocfg"}, Key: "k"}}}}
			},
			wantErr: `configmap "nocfg" not found`,
		},
		{
			name: "missing configMap key",
			mutate: func(p *v1.Pod, _ *fakeEnvSource) {
				p.Spec.Containers[0].Env = []v1.EnvVar{{Name: "K", ValueFrom: &v1.EnvVarSource{ConfigMapKeyRef: &v1.ConfigMapKeySelector{LocalObjectReference: v1.LocalObjectReference{Name: "cfg"}, Key: "nope"}}}}
			},
			wantErr: "couldn't find key nope in ConfigMap ns/cfg",
		},
		{
			name: "missing secret",
			mutate: func(p *v1.Pod, _ *fakeEnvSource) {
				p.Spec.Containers[0].EnvFrom = []v1.EnvFromSource{{SecretRef: &v1.SecretEnvSource{LocalObjectReference: v1.LocalObjectReference{Name: "nosec"}}}}
			},
			wantErr: `secret "nosec" not found`,
		},
		{
			name: "missing secret key",
			mutate: func(p *v1.Pod, _ *fakeEnvSource) {
				p.Spec.Containers[0].Env = []v1.EnvVar{{Name: "K", ValueFrom: &v1.EnvVarSource{SecretKeyRef: &v1.SecretKeySelector{LocalObjectReference: v1.LocalObjectReference{Name: "sec"}, Key: "nope"}}}}
			},
			wantErr: "couldn't find key nope in Secret ns/sec",
		},
		{
			name: "envFrom with prefix, relaxed names kept, impossible ones skipped, env overrides",
			mutate: func(p *v1.Pod, _ *fakeEnvSource) {
				p.Spec.Containers[0].EnvFrom = []v1.EnvFromSource{
					{ConfigMapRef: &v1.ConfigMapEnvSource{LocalObjectReference: v1.LocalObjectReference{Name: "cfg"}}},
					{Prefix: "S_", SecretRef: &v1.SecretEnvSource{LocalObjectReference: v1.LocalObjectReference{Name: "sec"}}},
					{ConfigMapRef: &v1.ConfigMapEnvSource{LocalObjectReference: v1.LocalObjectReference{Name: "nocfg"}, Optional: ptr.To(true)}},
				}
				p.Spec.Containers[0].Env = []v1.EnvVar{{Name: "k", Value: "override-$(S_pw)"}}
			},
			want: withKube(map[string]string{"k": "override-hunter2", "other": "o", "bad key": "x", "1digit": "y", "S_pw": "hunter2", "S_USER": "root"}),
			warn: "InvalidEnvironmentVariableNames: Keys [a=b] from the EnvFrom configMap ns/cfg were skipped since they are considered invalid environment variable names.",
		},
		{
			name: "service links",
			mutate: func(p *v1.Pod, _ *fakeEnvSource) {
				p.Spec.EnableServiceLinks = ptr.To(true)
				p.Spec.Containers[0].Env = []v1.EnvVar{{Name: "MY_SVC_SERVICE_HOST", Value: "mine"}}
			},
			want: withKube(map[string]string{
				"MY_SVC_SERVICE_HOST":         "mine",
				"MY_SVC_SERVICE_PORT":         "80",
				"MY_SVC_SERVICE_PORT_DNS_UDP": "53",
				"MY_SVC_PORT":                 "tcp://10.96.0.10:80",
				"MY_SVC_PORT_80_TCP":          "tcp://10.96.0.10:80",
				"MY_SVC_PORT_80_TCP_PROTO":    "tcp",
				"MY_SVC_PORT_80_TCP_PORT":     "80",
				"MY_SVC_PORT_80_TCP_ADDR":     "10.96.0.10",
				"MY_SVC_PORT_53_UDP":          "udp://10.96.0.10:53",
				"MY_SVC_PORT_53_UDP_PROTO":    "udp",
				"MY_SVC_PORT_53_UDP_PORT":     "53",
				"MY_SVC_PORT_53_UDP_ADDR":     "10.96.0.10",
			}),
			order: []string{"MY_SVC_SERVICE_HOST"},
		},
		{
			name: "a namespace's own kubernetes service wins",
			mutate: func(p *v1.Pod, s *fakeEnvSource) {
				p.Spec.EnableServiceLinks = ptr.To(true)
				s.services["ns"] = []*v1.Service{svc("ns", "kubernetes", "fd00::10", v1.ServicePort{Port: 8443})}
			},
			want: map[string]string{
				"KUBERNETES_SERVICE_HOST":        "fd00::10",
				"KUBERNETES_SERVICE_PORT":        "8443",
				"KUBERNETES_PORT":                "tcp://[fd00::10]:8443",
				"KUBERNETES_PORT_8443_TCP":       "tcp://[fd00::10]:8443",
				"KUBERNETES_PORT_8443_TCP_PROTO": "tcp",
				"KUBERNETES_PORT_8443_TCP_PORT":  "8443",
				"KUBERNETES_PORT_8443_TCP_ADDR":  "fd00::10",
			},
		},
		{
			name:    "services not yet seen",
			mutate:  func(_ *v1.Pod, s *fakeEnvSource) { s.notSynced = true },
			wantErr: "services have not yet been read at least once, cannot construct envvars",
		},
		{
			name: "a static pod does not wait for services",
			mutate: func(p *v1.Pod, s *fakeEnvSource) {
				s.notSynced = true
				p.Annotations["kubernetes.io/config.source"] = "file"
				p.Spec.Containers[0].Env = []v1.EnvVar{{Name: "A", Value: "a"}}
			},
			want: map[string]string{"A": "a"},
		},
		{
			name: "default namespace pod without links gets only kubernetes",
			mutate: func(p *v1.Pod, _ *fakeEnvSource) {
				p.Namespace = "default"
			},
			want: kubeVars,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod, src := envPod(), envSource()
			if tc.mutate != nil {
				tc.mutate(pod, src)
			}
			var warned []string
			in := EnvInputs{Source: src, PodIPs: []string{"10.1.0.5", "fd01::5"}, HostIPs: []string{"192.168.0.1", "fd00::1"},
				Allocatable: v1.ResourceList{v1.ResourceCPU: cpu("4"), v1.ResourceMemory: cpu("4Gi")},
				Warn:        func(reason, msg string) { warned = append(warned, reason+": "+msg) }}
			got, err := ResolveEnv(context.Background(), pod, &pod.Spec.Containers[0], in)
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			m := map[string]string{}
			var keys []string
			for _, kv := range got.Vars {
				if _, dup := m[kv.Key]; dup {
					t.Errorf("variable %s twice", kv.Key)
				}
				m[kv.Key] = string(kv.Value)
				keys = append(keys, kv.Key)
			}
			for k, v := range tc.want {
				if m[k] != v {
					t.Errorf("%s = %q, want %q", k, m[k], v)
				}
			}
			for k := range m {
				if _, ok := tc.want[k]; !ok {
					t.Errorf("unexpected %s=%q", k, m[k])
				}
			}
			if len(tc.order) > 0 && strings.Join(keys[:len(tc.order)], ",") != strings.Join(tc.order, ",") {
				t.Errorf("order %v, want prefix %v", keys, tc.order)
			}
			if w := strings.Join(warned, "\n"); w != tc.warn {
				t.Errorf("warnings %q, want %q", w, tc.warn)
			}
		})
	}
}

func TestExpandCommand(t *testing.T) {
	env := map[string]string{"MSG": "hi", "N": "3"}
	got := ExpandCommand([]string{"echo", "$(MSG)", "$$(MSG)", "$(NOPE)", "x$(N)"}, env)
	want := []string{"echo", "hi", "$(MSG)", "$(NOPE)", "x3"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("got %q, want %q", got, want)
	}
	if ExpandCommand(nil, env) != nil {
		t.Error("nil command must stay nil")
	}
}
