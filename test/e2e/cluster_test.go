//go:build e2e

package e2e

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	certv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodeagent/nodeagent/test/e2e/framework"
	"github.com/nodeagent/nodeagent/test/harness"
)

func TestMain(m *testing.M) { framework.Main(m) }

func TestAPIServerReady(t *testing.T) {
	t.Parallel()
	if out := framework.Kubectl(t, "get", "--raw", "/readyz"); out != "ok" {
		t.Fatalf("kubectl get --raw /readyz = %q, want ok", out)
	}
	version, err := harness.KubeVersion(framework.Cluster(t).RepoDir)
	if err != nil {
		t.Fatal(err)
	}
	out := framework.Kubectl(t, "version", "-o", "json")
	// Both the client and the server must carry the pinned release, not v0.0.0-master.
	if n := strings.Count(out, `"gitVersion": "`+version+`"`); n != 2 {
		t.Fatalf("kubectl version: want client and server at %s, got:\n%s", version, out)
	}
}

func TestRuntimeAnswersCRI(t *testing.T) {
	t.Parallel()
	rt, _ := framework.CRI(t)
	v, err := rt.Version(framework.Context(t, 10*time.Second), &runtimeapi.VersionRequest{})
	if err != nil {
		t.Fatalf("CRI Version: %v", err)
	}
	if v.RuntimeName != "containerd" || v.RuntimeApiVersion != "v1" {
		t.Fatalf("CRI Version = %+v, want containerd speaking CRI v1", v)
	}
	if framework.Cluster(t).Runtime == harness.RuntimeContainerd && v.RuntimeVersion != harness.ContainerdVersion {
		t.Fatalf("runtime version %q, want the pinned %s", v.RuntimeVersion, harness.ContainerdVersion)
	}
	st, err := rt.Status(framework.Context(t, 10*time.Second), &runtimeapi.StatusRequest{})
	if err != nil {
		t.Fatalf("CRI Status: %v", err)
	}
	ready := map[string]bool{}
	for _, c := range st.Status.Conditions {
		ready[c.Type] = c.Status
		if !c.Status && (c.Type == runtimeapi.RuntimeReady || c.Type == runtimeapi.NetworkReady) {
			t.Errorf("runtime condition %s is false: %s %s", c.Type, c.Reason, c.Message)
		}
	}
	if !ready[runtimeapi.RuntimeReady] || !ready[runtimeapi.NetworkReady] {
		t.Errorf("runtime conditions %v: want RuntimeReady and NetworkReady true", ready)
	}
}

func TestImagesInRuntimeAndRegistry(t *testing.T) {
	t.Parallel()
	_, img := framework.CRI(t)
	resp, err := img.ListImages(framework.Context(t, 10*time.Second), &runtimeapi.ListImagesRequest{})
	if err != nil {
		t.Fatalf("CRI ListImages: %v", err)
	}
	have := map[string]bool{}
	for _, i := range resp.Images {
		for _, tag := range i.RepoTags {
			have[tag] = true
		}
	}
	for _, want := range harness.Images() {
		if !have[want] {
			t.Errorf("image %s is not in the runtime (have %v)", want, have)
		}
	}
	for _, path := range []string{"pause/manifests/" + harness.PauseTag, "e2e-test-images/agnhost/manifests/" + harness.AgnhostTag,
		"e2e-test-images/busybox/manifests/" + harness.BusyboxE2ETag, "library/busybox/manifests/latest"} {
		if code := registryGet(t, harness.RegistryAddr, path, false); code != http.StatusOK {
			t.Errorf("GET %s from the open registry: %d, want 200", path, code)
		}
	}
}

func TestProtectedRegistryRefusesAnonymousPulls(t *testing.T) {
	t.Parallel()
	path := "pause/manifests/" + harness.PauseTag
	if code := registryGet(t, harness.AuthRegistry, path, false); code != http.StatusUnauthorized {
		t.Errorf("anonymous GET %s from the protected registry: %d, want 401", path, code)
	}
	if code := registryGet(t, harness.AuthRegistry, path, true); code != http.StatusOK {
		t.Errorf("authenticated GET %s from the protected registry: %d, want 200", path, code)
	}
	// The runtime itself: refused without credentials, served with them.
	_, img := framework.CRI(t)
	ref := harness.AuthRegistry + "/e2e-test-images/busybox:" + harness.BusyboxE2ETag
	ctx := framework.Context(t, time.Minute)
	if _, err := img.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: ref}}); err == nil {
		t.Errorf("anonymous CRI pull of %s succeeded, want it refused", ref)
	}
	auth := &runtimeapi.AuthConfig{Username: harness.RegistryUser, Password: harness.RegistryPass}
	if _, err := img.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: ref}, Auth: auth}); err != nil {
		t.Errorf("CRI pull of %s with credentials: %v", ref, err)
	}
}

func registryGet(t *testing.T, registry, path string, withAuth bool) int {
	t.Helper()
	req, err := http.NewRequestWithContext(framework.Context(t, 10*time.Second), http.MethodGet, "http://"+registry+"/v2/"+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "application/vnd.docker.distribution.manifest.v2+json, application/vnd.oci.image.manifest.v1+json")
	if withAuth {
		req.SetBasicAuth(harness.RegistryUser, harness.RegistryPass)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", req.URL, err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

// TestPodNetworkThroughCRI runs a sandbox and a busybox container straight through CRI:
// runc, the pause image and the CNI bridge work before any agent is involved.
func TestPodNetworkThroughCRI(t *testing.T) {
	t.Parallel()
	rt, _ := framework.CRI(t)
	ctx := framework.Context(t, 2*time.Minute)
	cfg := framework.Cluster(t)
	sbCfg := &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: "cri-smoke", Namespace: "harness-e2e", Uid: fmt.Sprintf("cri-smoke-%d", time.Now().UnixNano())},
		Hostname:     "cri-smoke",
		LogDirectory: cfg.RunDir + "/e2e-logs/cri-smoke",
		Linux:        &runtimeapi.LinuxPodSandboxConfig{CgroupParent: harness.CgroupRoot + "/e2e-cri-smoke"},
	}
	sb, err := rt.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: sbCfg})
	if err != nil {
		t.Fatalf("RunPodSandbox: %v", err)
	}
	t.Cleanup(func() {
		ctx := framework.Context(t, time.Minute)
		if _, err := rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: sb.PodSandboxId}); err != nil {
			t.Errorf("StopPodSandbox: %v", err)
		}
		if _, err := rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: sb.PodSandboxId}); err != nil {
			t.Errorf("RemovePodSandbox: %v", err)
		}
	})
	st, err := rt.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: sb.PodSandboxId})
	if err != nil {
		t.Fatalf("PodSandboxStatus: %v", err)
	}
	ip := st.Status.GetNetwork().GetIp()
	if !strings.HasPrefix(ip, strings.TrimSuffix(harness.PodCIDR, "0/24")) {
		t.Fatalf("sandbox IP %q is not in the pod CIDR %s", ip, harness.PodCIDR)
	}
	ctr, err := rt.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{
		PodSandboxId:  sb.PodSandboxId,
		SandboxConfig: sbCfg,
		Config: &runtimeapi.ContainerConfig{
			Metadata: &runtimeapi.ContainerMetadata{Name: "sleeper"},
			Image:    &runtimeapi.ImageSpec{Image: harness.BusyboxImage},
			Command:  []string{"sleep", "3600"},
			LogPath:  "sleeper.log",
		},
	})
	if err != nil {
		t.Fatalf("CreateContainer: %v", err)
	}
	if _, err := rt.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: ctr.ContainerId}); err != nil {
		t.Fatalf("StartContainer: %v", err)
	}
	out, err := rt.ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: ctr.ContainerId, Cmd: []string{"ip", "-4", "-o", "addr", "show", "eth0"}, Timeout: 10})
	if err != nil || out.ExitCode != 0 {
		t.Fatalf("exec ip addr: %v %s %s", err, out.GetStdout(), out.GetStderr())
	}
	if !strings.Contains(string(out.Stdout), ip+"/24") {
		t.Fatalf("container's eth0 = %q, want %s/24", out.Stdout, ip)
	}
	// The node IP answers from inside the pod: the pod bridge routes to the host.
	ping, err := rt.ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: ctr.ContainerId, Cmd: []string{"ping", "-c", "1", "-W", "5", harness.NodeIP}, Timeout: 15})
	if err != nil || ping.ExitCode != 0 {
		t.Fatalf("ping the node IP from the pod: %v %s %s", err, ping.GetStdout(), ping.GetStderr())
	}
}

// TestControllersServeTheNode checks the controller-manager's part of the node's world:
// a pod CIDR for the node, service-account tokens, and signed CSRs.
func TestControllersServeTheNode(t *testing.T) {
	t.Parallel()
	cs := framework.Client(t)
	ctx := framework.Context(t, 2*time.Minute)
	framework.Eventually(t, time.Minute, func() error {
		_, err := cs.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		return err
	})
	if framework.Cluster(t).Agent != harness.AgentNone {
		framework.Eventually(t, time.Minute, func() error {
			node, err := cs.CoreV1().Nodes().Get(ctx, harness.NodeName, metav1.GetOptions{})
			if err != nil {
				return err
			}
			// Any block of the cluster range: a node registered again gets a new one.
			if !strings.HasPrefix(node.Spec.PodCIDR, "10.244.") || !strings.HasSuffix(node.Spec.PodCIDR, "/24") {
				return fmt.Errorf("node podCIDR %q, want a /24 of %s", node.Spec.PodCIDR, harness.ClusterCIDR)
			}
			return nil
		})
	}
	csr := &certv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "e2e-"},
		Spec: certv1.CertificateSigningRequestSpec{
			Request:    newCSR(t, "e2e-user"),
			SignerName: certv1.KubeAPIServerClientSignerName,
			Usages:     []certv1.KeyUsage{certv1.UsageClientAuth},
		},
	}
	created, err := cs.CertificatesV1().CertificateSigningRequests().Create(ctx, csr, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create CSR: %v", err)
	}
	t.Cleanup(func() {
		_ = cs.CertificatesV1().CertificateSigningRequests().Delete(framework.Context(t, 10*time.Second), created.Name, metav1.DeleteOptions{})
	})
	created.Status.Conditions = append(created.Status.Conditions, certv1.CertificateSigningRequestCondition{
		Type: certv1.CertificateApproved, Status: corev1.ConditionTrue, Reason: "E2E", Message: "approved by the harness test",
	})
	if _, err := cs.CertificatesV1().CertificateSigningRequests().UpdateApproval(ctx, created.Name, created, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("approve CSR: %v", err)
	}
	framework.Eventually(t, time.Minute, func() error {
		got, err := cs.CertificatesV1().CertificateSigningRequests().Get(ctx, created.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if len(got.Status.Certificate) == 0 {
			return fmt.Errorf("CSR %s not signed yet", created.Name)
		}
		return nil
	})
}

// TestSchedulerBindsPodsToTheNode: the stock scheduler places a pod on the harness's node.
func TestSchedulerBindsPodsToTheNode(t *testing.T) {
	t.Parallel()
	if framework.Cluster(t).Agent == harness.AgentNone {
		t.Fatal("this test needs a node: run the harness with an agent")
	}
	cs := framework.Client(t)
	ctx := framework.Context(t, 2*time.Minute)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "sched-", Namespace: "default"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: harness.BusyboxImage, Command: []string{"sleep", "3600"}}}},
	}
	created, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create pod: %v", err)
	}
	t.Cleanup(func() {
		zero := int64(0)
		_ = cs.CoreV1().Pods("default").Delete(framework.Context(t, 10*time.Second), created.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
	})
	framework.Eventually(t, time.Minute, func() error {
		got, err := cs.CoreV1().Pods("default").Get(ctx, created.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if got.Spec.NodeName != harness.NodeName {
			return fmt.Errorf("pod %s bound to %q, want %s", got.Name, got.Spec.NodeName, harness.NodeName)
		}
		return nil
	})
}
