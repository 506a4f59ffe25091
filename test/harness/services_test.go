package harness

import (
	"bytes"
	"reflect"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"
)

// The manifests of deploy/coredns decode and name what the harness pushes and the agents
// are told: the image, the cluster DNS address, the labels the Service selects.
func TestCoreDNSManifests(t *testing.T) {
	cfg := &Config{RepoDir: "../..", RunDir: "/var/lib/nodeagent-test"}
	objs, err := cfg.coreDNSObjects()
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]int{}
	for _, o := range objs {
		kinds[o.GetKind()]++
		switch o.GetKind() {
		case "Deployment":
			var d appsv1.Deployment
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &d); err != nil {
				t.Fatal(err)
			}
			if d.Name != CoreDNSDeployment || d.Namespace != "kube-system" || d.Spec.Template.Labels["k8s-app"] != "kube-dns" {
				t.Errorf("Deployment %s/%s labels %v", d.Namespace, d.Name, d.Spec.Template.Labels)
			}
			c := d.Spec.Template.Spec.Containers[0]
			if c.Image != CoreDNSImage {
				t.Errorf("image %s, want %s (what the harness pushes)", c.Image, CoreDNSImage)
			}
			sc := c.SecurityContext
			if sc == nil || !ptr.Deref(sc.RunAsNonRoot, false) || ptr.Deref(sc.AllowPrivilegeEscalation, true) ||
				sc.Capabilities == nil || !reflect.DeepEqual(sc.Capabilities.Add, []corev1.Capability{"NET_BIND_SERVICE"}) {
				t.Errorf("securityContext %+v: want non-root with NET_BIND_SERVICE alone", sc)
			}
			if c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet == nil || c.ReadinessProbe.HTTPGet.Path != "/ready" {
				t.Errorf("readiness probe %+v, want /ready", c.ReadinessProbe)
			}
		case "Service":
			var s corev1.Service
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &s); err != nil {
				t.Fatal(err)
			}
			if s.Name != "kube-dns" || s.Spec.ClusterIP != ClusterDNS || s.Spec.Selector["k8s-app"] != "kube-dns" || len(s.Spec.Ports) != 3 {
				t.Errorf("Service %s at %s selecting %v with %d ports; want kube-dns at %s", s.Name, s.Spec.ClusterIP, s.Spec.Selector, len(s.Spec.Ports), ClusterDNS)
			}
		case "ConfigMap":
			var cm corev1.ConfigMap
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &cm); err != nil {
				t.Fatal(err)
			}
			corefile := cm.Data["Corefile"]
			if !strings.Contains(corefile, "kubernetes "+ClusterDomain+" ") {
				t.Errorf("Corefile does not serve %s:\n%s", ClusterDomain, corefile)
			}
			// Every query stays on this machine.
			if strings.Contains(corefile, "forward") || strings.Contains(corefile, "proxy") {
				t.Errorf("Corefile sends queries elsewhere:\n%s", corefile)
			}
		}
	}
	for _, k := range []string{"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "ConfigMap", "Deployment", "Service"} {
		if kinds[k] != 1 {
			t.Errorf("%d objects of kind %s, want 1", kinds[k], k)
		}
	}
}

// The KubeProxyConfiguration parses, and leaves the machine's global settings alone.
func TestKubeProxyConfig(t *testing.T) {
	cfg := &Config{RunDir: "/var/lib/nodeagent-test"}
	var got map[string]any
	if err := yaml.UnmarshalStrict([]byte(cfg.kubeProxyConfig("node-1", "10.254.250.11", "/k.conf")), &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"hostnameOverride":   "node-1",
		"bindAddress":        "10.254.250.11",
		"healthzBindAddress": "10.254.250.11:10256",
		"metricsBindAddress": "10.254.250.11:10249",
		"mode":               "iptables",
		"clusterCIDR":        ClusterCIDR,
		"nodePortAddresses":  []any{"10.254.250.11/32"},
		"clientConnection":   map[string]any{"kubeconfig": "/k.conf"},
		"iptables":           map[string]any{"localhostNodePorts": false},
	}
	for k, v := range want {
		if !reflect.DeepEqual(got[k], v) {
			t.Errorf("%s = %#v, want %#v", k, got[k], v)
		}
	}
	ct, _ := got["conntrack"].(map[string]any)
	if ct["maxPerCore"] != float64(0) || ct["tcpEstablishedTimeout"] != "0s" || ct["tcpCloseWaitTimeout"] != "0s" {
		t.Errorf("conntrack %v: kube-proxy would write conntrack sysctls", ct)
	}
	if args := cfg.kubeProxyArgs("/c.yaml"); args[0] != "--config=/c.yaml" {
		t.Errorf("args %v", args)
	}
}

func TestKubeProxyChains(t *testing.T) {
	save := `*nat
:PREROUTING ACCEPT [0:0]
:KUBE-KUBELET-CANARY - [0:0]
:KUBE-SERVICES - [0:0]
:KUBE-SVC-NPX46M4PTMTKRN6Y - [0:0]
:CNI-HOSTPORT-DNAT - [0:0]
-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
COMMIT
`
	left := kubeChains(save)
	if want := []string{"KUBE-KUBELET-CANARY", "KUBE-SERVICES", "KUBE-SVC-NPX46M4PTMTKRN6Y"}; !reflect.DeepEqual(left, want) {
		t.Errorf("kubeChains = %v, want %v", left, want)
	}
	if !proxyOwn([]string{"iptables-save nat: KUBE-KUBELET-CANARY", "iptables-save nat: KUBE-SERVICES"}) {
		t.Errorf("proxyOwn does not see KUBE-SERVICES")
	}
	if proxyOwn([]string{"iptables-save nat: KUBE-KUBELET-CANARY", "ip6tables-save filter: KUBE-FIREWALL"}) {
		t.Errorf("proxyOwn takes the kubelet's chains for kube-proxy's")
	}
}

// The value `setcap cap_net_bind_service=+ep` writes (getcap shows it so).
func TestFileCapability(t *testing.T) {
	want := []byte{0x01, 0, 0, 0x02, 0, 0x04, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
	if got := fileCapability(capNetBindService); !bytes.Equal(got, want) {
		t.Errorf("fileCapability = % x, want % x", got, want)
	}
}

func TestDeploymentAvailable(t *testing.T) {
	base := func() *appsv1.Deployment {
		return &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: "d", Generation: 2},
			Spec:       appsv1.DeploymentSpec{Replicas: ptr.To(int32(1))},
			Status:     appsv1.DeploymentStatus{ObservedGeneration: 2, Replicas: 1, UpdatedReplicas: 1, AvailableReplicas: 1},
		}
	}
	tests := []struct {
		name   string
		mutate func(*appsv1.Deployment)
		ok     bool
	}{
		{name: "rolled out", mutate: func(*appsv1.Deployment) {}, ok: true},
		{name: "not observed", mutate: func(d *appsv1.Deployment) { d.Status.ObservedGeneration = 1 }},
		{name: "not available", mutate: func(d *appsv1.Deployment) { d.Status.AvailableReplicas = 0 }},
		{name: "old pod left", mutate: func(d *appsv1.Deployment) { d.Status.Replicas = 2 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := base()
			tt.mutate(d)
			if err := deploymentAvailable(d); (err == nil) != tt.ok {
				t.Errorf("deploymentAvailable = %v, want ok=%v", err, tt.ok)
			}
		})
	}
}
