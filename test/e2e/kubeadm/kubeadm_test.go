//go:build e2e

// Package kubeadm makes a cluster the way kubeadm's users do, with nodeagent as every
// node's kubelet (harness.Config.Kubeadm): nodeagent installed from manifests/ as the
// kubelet's systemd service, `kubeadm init` on the first node, whose control plane then
// runs as nodeagent's static pods; `kubeadm join` of the second node with a
// JoinConfiguration as an operator writes it, and of the third with kind's. Bringing the
// cluster up is the first check: kubeadm exits 0 on every node and every Node gets Ready
// (TestMain fails the binary otherwise). The tests check what kubeadm's users see then.
package kubeadm

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodeagent/nodeagent/test/e2e/framework"
	"github.com/nodeagent/nodeagent/test/harness"
)

func TestMain(m *testing.M) {
	framework.MainWith(m, &harness.Config{Kubeadm: true, NodeCount: 3})
}

const controlPlaneRole = "node-role.kubernetes.io/control-plane"

func nodes(t *testing.T) (cp harness.Node, workers []harness.Node) {
	t.Helper()
	all := framework.Cluster(t).Nodes()
	if len(all) != 3 {
		t.Fatalf("%d nodes, want 3", len(all))
	}
	return all[0], all[1:]
}

// TestNodesReadyWithRoles: every node is Ready at its address with a pod CIDR of its own;
// kubeadm's mark-control-plane labelled and tainted the first, and only the first.
func TestNodesReadyWithRoles(t *testing.T) {
	cp, _ := nodes(t)
	for _, node := range framework.ReadyNodes(t) {
		_, labelled := node.Labels[controlPlaneRole]
		tainted := false
		for _, taint := range node.Spec.Taints {
			tainted = tainted || (taint.Key == controlPlaneRole && taint.Effect == corev1.TaintEffectNoSchedule)
		}
		if want := node.Name == cp.Name; labelled != want || tainted != want {
			t.Errorf("node %s: control-plane label %v, taint %v; want both %v", node.Name, labelled, tainted, want)
		}
	}
}

// TestControlPlaneIsStaticPods: the four components kubeadm wrote to
// /etc/kubernetes/manifests run as nodeagent's static pods, mirrored in kube-system as the
// kubelet mirrors them (the config.mirror annotation, the Node as controlling owner),
// Running and Ready, and `kubectl get pods -n kube-system` lists them.
func TestControlPlaneIsStaticPods(t *testing.T) {
	cp, _ := nodes(t)
	cs := framework.Client(t)
	listed := framework.Kubectl(t, "get", "pods", "-n", "kube-system", "-o", "name")
	for _, component := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"} {
		name := component + "-" + cp.Name
		if !strings.Contains(listed, "pod/"+name+"\n") {
			t.Errorf("kubectl get pods -n kube-system does not list %s:\n%s", name, listed)
		}
		framework.Eventually(t, 2*time.Minute, func() error {
			pod, err := cs.CoreV1().Pods("kube-system").Get(context.Background(), name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if pod.Annotations["kubernetes.io/config.mirror"] == "" || pod.Annotations["kubernetes.io/config.mirror"] != pod.Annotations["kubernetes.io/config.hash"] {
				return fmt.Errorf("%s: config.mirror %q, config.hash %q", name, pod.Annotations["kubernetes.io/config.mirror"], pod.Annotations["kubernetes.io/config.hash"])
			}
			if refs := pod.OwnerReferences; len(refs) != 1 || refs[0].Kind != "Node" || refs[0].Name != cp.Name || refs[0].Controller == nil || !*refs[0].Controller {
				return fmt.Errorf("%s: owner references %+v, want the Node %s as controller", name, refs, cp.Name)
			}
			if pod.Spec.NodeName != cp.Name || pod.Status.Phase != corev1.PodRunning || !podReady(pod) {
				return fmt.Errorf("%s on %q: phase %s, ready %v", name, pod.Spec.NodeName, pod.Status.Phase, podReady(pod))
			}
			return nil
		})
	}
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// TestWorkersJoinedByTLSBootstrap: each worker came in through a bootstrap token: its
// client CSR (signer kube-apiserver-client-kubelet) was requested by the token's identity,
// approved by the controller-manager and issued; the agent keeps the certificate as the
// kubelet does (kubelet-client-current.pem, a link to a kubelet-client-<timestamp>.pem),
// kubelet.conf names it, and kubeadm removed the bootstrap kubeconfig.
func TestWorkersJoinedByTLSBootstrap(t *testing.T) {
	_, workers := nodes(t)
	c := framework.Cluster(t)
	ctx := framework.Context(t, time.Minute)
	csrs, err := framework.Client(t).CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tokenUser := "system:bootstrap:" + strings.SplitN(harness.KubeadmToken, ".", 2)[0]
	timestamped := regexp.MustCompile(`^kubelet-client-\d{4}-\d{2}-\d{2}-\d{2}-\d{2}-\d{2}\.pem$`)
	for _, n := range workers {
		t.Run(n.Name, func(t *testing.T) {
			var found *certificatesv1.CertificateSigningRequest
			for i := range csrs.Items {
				csr := &csrs.Items[i]
				if csr.Spec.SignerName == certificatesv1.KubeAPIServerClientKubeletSignerName && requestCN(t, csr) == "system:node:"+n.Name {
					found = csr
				}
			}
			if found == nil {
				t.Fatalf("no %s CSR for system:node:%s", certificatesv1.KubeAPIServerClientKubeletSignerName, n.Name)
			}
			approved := false
			for _, cond := range found.Status.Conditions {
				approved = approved || (cond.Type == certificatesv1.CertificateApproved && cond.Status == corev1.ConditionTrue)
			}
			if found.Spec.Username != tokenUser || !approved || len(found.Status.Certificate) == 0 {
				t.Errorf("CSR %s: requested by %q (want %q), approved %v, issued %v", found.Name, found.Spec.Username, tokenUser, approved, len(found.Status.Certificate) > 0)
			}
			pki := filepath.Join(c.KubeadmNodeDir(n, "/var/lib/kubelet"), "pki")
			target, err := os.Readlink(filepath.Join(pki, "kubelet-client-current.pem"))
			if err != nil {
				t.Fatalf("kubelet-client-current.pem: %v", err)
			}
			if !timestamped.MatchString(filepath.Base(target)) {
				t.Errorf("kubelet-client-current.pem links to %q, want kubelet-client-<timestamp>.pem", target)
			}
			etc := c.KubeadmNodeDir(n, "/etc/kubernetes")
			kubeconfig, err := os.ReadFile(filepath.Join(etc, "kubelet.conf"))
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(kubeconfig), "/var/lib/kubelet/pki/kubelet-client-current.pem") {
				t.Errorf("kubelet.conf does not name /var/lib/kubelet/pki/kubelet-client-current.pem:\n%s", kubeconfig)
			}
			if _, err := os.Stat(filepath.Join(etc, "bootstrap-kubelet.conf")); !os.IsNotExist(err) {
				t.Errorf("bootstrap-kubelet.conf still there after the join (%v)", err)
			}
		})
	}
}

// TestKindJoinContract: the node that joined with kind's configuration registered with
// kind's provider ID, and its agent runs on kind's kubelet settings as kubeadm wrote them
// (the cluster's KubeletConfiguration with the node's patch).
func TestKindJoinContract(t *testing.T) {
	_, workers := nodes(t)
	kindNode := workers[1]
	node, err := framework.Client(t).CoreV1().Nodes().Get(framework.Context(t, time.Minute), kindNode.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if want := "kind://docker/nodeagent/" + kindNode.Name; node.Spec.ProviderID != want {
		t.Errorf("node %s: providerID %q, want %q", kindNode.Name, node.Spec.ProviderID, want)
	}
	data, err := os.ReadFile(filepath.Join(framework.Cluster(t).KubeadmNodeDir(kindNode, "/var/lib/kubelet"), "config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"imageGCHighThresholdPercent: 100", "nodefs.available:", "cgroupRoot: " + kindNode.CgroupRoot()} {
		if !strings.Contains(string(data), want) {
			t.Errorf("%s's config.yaml lacks %q:\n%s", kindNode.Name, want, data)
		}
	}
}

// requestCN is the common name a CSR asks for.
func requestCN(t *testing.T, csr *certificatesv1.CertificateSigningRequest) string {
	t.Helper()
	block, _ := pem.Decode(csr.Spec.Request)
	if block == nil {
		t.Fatalf("CSR %s: no PEM request", csr.Name)
	}
	req, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		t.Fatalf("CSR %s: %v", csr.Name, err)
	}
	return req.Subject.CommonName
}

// TestPodsOnEveryNodeReachEachOther: a pod runs on each node (on the control plane by
// tolerating its taint), and the pod on the first worker reaches every other one by its
// pod IP, across the nodes' own pod networks; `kubectl exec` goes through the apiserver
// to each agent.
func TestPodsOnEveryNodeReachEachOther(t *testing.T) {
	var pods []*corev1.Pod
	for _, n := range framework.Cluster(t).Nodes() {
		pods = append(pods, framework.RunReady(t, netexec("netexec-"+n.Name, n)))
	}
	client := pods[1] // on the first worker
	for _, p := range pods {
		if p == client {
			continue
		}
		url := fmt.Sprintf("http://%s:8080/hostname", p.Status.PodIP)
		framework.Eventually(t, time.Minute, func() error {
			out, err := framework.KubectlErr(t, "exec", "-n", "default", client.Name, "--", "curl", "-sS", "--max-time", "5", url)
			if err != nil {
				return err
			}
			if out != p.Name {
				return fmt.Errorf("%s from %s on %s answered %q, want %q", url, client.Name, client.Spec.NodeName, out, p.Name)
			}
			return nil
		})
	}
}

// TestKubeProxyDaemonSet: kubeadm's kube-proxy addon is a DaemonSet (host network,
// privileged, a ConfigMap and hostPath volumes, a service account token): its pod is Ready
// on every node, and a ClusterIP Service whose backend is on one worker answers a pod on
// the other through the rules of its node's kube-proxy.
func TestKubeProxyDaemonSet(t *testing.T) {
	cs := framework.Client(t)
	ctx := framework.Context(t, 4*time.Minute)
	want := int32(len(framework.Cluster(t).Nodes()))
	framework.Eventually(t, 3*time.Minute, func() error {
		ds, err := cs.AppsV1().DaemonSets("kube-system").Get(ctx, "kube-proxy", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if ds.Status.DesiredNumberScheduled != want || ds.Status.NumberReady != want {
			return fmt.Errorf("kube-proxy: %d of %d pods ready, %d scheduled; want %d", ds.Status.NumberReady, ds.Status.DesiredNumberScheduled, ds.Status.CurrentNumberScheduled, want)
		}
		return nil
	})
	_, workers := nodes(t)
	backend := netexec("svc-backend", workers[0])
	backend.Labels = map[string]string{"app": "svc-backend"}
	backend = framework.RunReady(t, backend)
	client := framework.RunReady(t, netexec("svc-client", workers[1]))
	svc, err := cs.CoreV1().Services("default").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "svc-backend"},
		Spec: corev1.ServiceSpec{
			Selector: backend.Labels,
			Ports:    []corev1.ServicePort{{Port: 80, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(8080)}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.CoreV1().Services("default").Delete(context.Background(), svc.Name, metav1.DeleteOptions{})
	})
	url := fmt.Sprintf("http://%s/hostname", svc.Spec.ClusterIP)
	framework.Eventually(t, 2*time.Minute, func() error {
		out, err := framework.KubectlErr(t, "exec", "-n", "default", client.Name, "--", "curl", "-sS", "--max-time", "5", url)
		if err != nil {
			return err
		}
		if out != backend.Name {
			return fmt.Errorf("%s from %s answered %q, want %q", url, client.Spec.NodeName, out, backend.Name)
		}
		return nil
	})
}

// netexec is agnhost's netexec on node n (HTTP on 8080), tolerating the control plane's
// taint.
func netexec(name string, n harness.Node) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: corev1.PodSpec{
			NodeName:    n.Name,
			Tolerations: []corev1.Toleration{{Key: controlPlaneRole, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
			Containers: []corev1.Container{{
				Name: "netexec", Image: harness.AgnhostImage,
				Args:  []string{"netexec", "--http-port=8080"},
				Ports: []corev1.ContainerPort{{ContainerPort: 8080, Protocol: corev1.ProtocolTCP}},
				ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{
					HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(8080)}}, PeriodSeconds: 1},
			}},
		},
	}
}

// TestRestartKeepsStaticPods: `systemctl restart kubelet` on the control-plane node, as
// kubeadm's kubelet-finalize and upgrades do it: the agent comes back under a new pid,
// renews the node's Lease, and adopts the running control plane: for 15 s after that every
// static pod still has the one container it had, running (seen through the node's CRI),
// and its mirror pod keeps its UID. (Last: the other tests need no restart.)
func TestRestartKeepsStaticPods(t *testing.T) {
	cp, _ := nodes(t)
	c := framework.Cluster(t)
	cs := framework.Client(t)
	ctx := framework.Context(t, 3*time.Minute)
	components := []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"}
	var staticPods []string
	for _, component := range components {
		staticPods = append(staticPods, component+"-"+cp.Name)
	}
	mirrorUIDs := func() (map[string]string, error) {
		out := map[string]string{}
		for _, component := range components {
			pod, err := cs.CoreV1().Pods("kube-system").Get(ctx, component+"-"+cp.Name, metav1.GetOptions{})
			if err != nil {
				return nil, err
			}
			out[component] = string(pod.UID)
		}
		return out, nil
	}
	rt, _, closeCRI, err := c.NodeCRI(ctx, cp)
	if err != nil {
		t.Fatal(err)
	}
	defer closeCRI()
	// The control plane's containers as the runtime has them: pod name → running container IDs.
	running := func() (map[string][]string, error) {
		resp, err := rt.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
		if err != nil {
			return nil, err
		}
		out := map[string][]string{}
		for _, ctr := range resp.Containers {
			pod := ctr.Labels["io.kubernetes.pod.name"]
			if ctr.Labels["io.kubernetes.pod.namespace"] != "kube-system" || !slices.Contains(staticPods, pod) {
				continue
			}
			if ctr.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
				return nil, fmt.Errorf("container %s of %s is %s", ctr.Id, pod, ctr.State)
			}
			out[pod] = append(out[pod], ctr.Id)
		}
		return out, nil
	}
	beforeUIDs, err := mirrorUIDs()
	if err != nil {
		t.Fatal(err)
	}
	before, err := running()
	if err != nil || len(before) != len(components) {
		t.Fatalf("control plane containers before the restart: %v (%v)", before, err)
	}
	mainPid := func() string {
		data, _ := os.ReadFile(filepath.Join(c.UnitStateDir(cp), "kubelet.service.mainpid"))
		return strings.TrimSpace(string(data))
	}
	pid := mainPid()
	restarted := time.Now()
	cmd, err := c.NodeCommand(ctx, cp, "systemctl", "restart", "kubelet")
	if err != nil {
		t.Fatal(err)
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("systemctl restart kubelet: %v: %s", err, out)
	}
	if now := mainPid(); now == pid || now == "" {
		t.Fatalf("the agent's pid after the restart: %q (was %q)", now, pid)
	}
	framework.Eventually(t, 2*time.Minute, func() error {
		lease, err := cs.CoordinationV1().Leases("kube-node-lease").Get(ctx, cp.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if lease.Spec.RenewTime == nil || !lease.Spec.RenewTime.After(restarted) {
			return fmt.Errorf("lease of %s not renewed since the restart at %s (%v)", cp.Name, restarted.Format(time.RFC3339), lease.Spec.RenewTime)
		}
		return nil
	})
	for end := time.Now().Add(15 * time.Second); time.Now().Before(end); time.Sleep(time.Second) {
		after, err := running()
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(after) != fmt.Sprint(before) {
			t.Fatalf("control plane containers after the restart %v, before %v", after, before)
		}
		uids, err := mirrorUIDs()
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(uids) != fmt.Sprint(beforeUIDs) {
			t.Fatalf("mirror pods after the restart %v, before %v", uids, beforeUIDs)
		}
	}
}
