//go:build e2e

package e2e

import (
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeagent/nodeagent/test/e2e/framework"
	"github.com/nodeagent/nodeagent/test/harness"
)

// nodeGet calls the node's API directly on its IP, with a bearer token or none.
func nodeGet(t *testing.T, path, token string) (int, string) {
	t.Helper()
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		// The serving certificate is the agent's self-signed one.
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true},
	}}
	req, err := http.NewRequest(http.MethodGet, fmt.Sprintf("https://%s:10250%s", harness.NodeIP, path), nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// TestNodeAPIAuthenticatesAndAuthorizes: anonymous is refused, a service account is
// authorized through SubjectAccessReview (fine-grained nodes/pods), and the apiserver's own
// client certificate reaches the node through the proxy.
func TestNodeAPIAuthenticatesAndAuthorizes(t *testing.T) {
	t.Parallel()
	requireNodeagent(t)
	cs := framework.Client(t)
	ctx := framework.Context(t, 2*time.Minute)
	if code, body := nodeGet(t, "/pods", ""); code != http.StatusUnauthorized {
		t.Errorf("anonymous GET /pods: %d %s, want 401", code, body)
	}
	ns := "default"
	sa, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{GenerateName: "nodeapi-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.CoreV1().ServiceAccounts(ns).Delete(framework.Context(t, 10*time.Second), sa.Name, metav1.DeleteOptions{})
	})
	tok, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa.Name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	token := tok.Status.Token
	if code, body := nodeGet(t, "/pods", token); code != http.StatusForbidden || !strings.Contains(body, "nodes") {
		t.Errorf("GET /pods without RBAC: %d %s, want 403 naming the node resource", code, body)
	}
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "nodeapi-pods-"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"nodes/pods"}, Verbs: []string{"get"}}},
	}
	role, err = cs.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.RbacV1().ClusterRoles().Delete(framework.Context(t, 10*time.Second), role.Name, metav1.DeleteOptions{})
	})
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: role.Name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: sa.Name}},
	}
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.RbacV1().ClusterRoleBindings().Delete(framework.Context(t, 10*time.Second), binding.Name, metav1.DeleteOptions{})
	})
	// The agent caches denials for 30 s (authorization.webhook.cacheUnauthorizedTTL).
	framework.Eventually(t, time.Minute, func() error {
		if code, body := nodeGet(t, "/pods", token); code != http.StatusOK || !strings.Contains(body, `"kind":"PodList"`) {
			return fmt.Errorf("GET /pods with nodes/pods get: %d %.200s", code, body)
		}
		return nil
	})
	if out := framework.Kubectl(t, "get", "--raw", "/api/v1/nodes/"+harness.NodeName+"/proxy/healthz"); out != "ok" {
		t.Errorf("healthz through the apiserver's node proxy = %q, want ok", out)
	}
}

// TestKubectlLogsAndExec goes through the apiserver to the node, as a user does.
func TestKubectlLogsAndExec(t *testing.T) {
	t.Parallel()
	requireNodeagent(t)
	cs := framework.Client(t)
	ctx := framework.Context(t, 3*time.Minute)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "logs-exec-", Namespace: "default"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "c", Image: harness.BusyboxImage,
			Command: []string{"sh", "-c", "echo hello; echo world; trap 'exit 0' TERM; sleep 3600 & wait"},
		}}},
	}
	created, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.CoreV1().Pods("default").Delete(framework.Context(t, 10*time.Second), created.Name, metav1.DeleteOptions{})
	})
	framework.Eventually(t, 2*time.Minute, func() error {
		p, err := cs.CoreV1().Pods("default").Get(ctx, created.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Status.Phase != corev1.PodRunning {
			return fmt.Errorf("pod %s is %s", p.Name, p.Status.Phase)
		}
		return nil
	})
	framework.Eventually(t, 30*time.Second, func() error {
		out, err := framework.KubectlErr(t, "logs", created.Name)
		if err != nil {
			return err
		}
		if out != "hello\nworld\n" {
			return fmt.Errorf("kubectl logs = %q, want hello and world", out)
		}
		return nil
	})
	if out := framework.Kubectl(t, "logs", created.Name, "--tail=1"); out != "world\n" {
		t.Errorf("kubectl logs --tail=1 = %q, want world", out)
	}
	if out := framework.Kubectl(t, "exec", created.Name, "--", "sh", "-c", "echo $((6*7))"); out != "42\n" {
		t.Errorf("kubectl exec = %q, want 42", out)
	}
	_, err = framework.KubectlErr(t, "exec", created.Name, "--", "sh", "-c", "exit 3")
	if err == nil || !strings.Contains(err.Error(), "exit status 3") {
		t.Errorf("kubectl exec of a command that exits 3: %v, want exit status 3", err)
	}
}
