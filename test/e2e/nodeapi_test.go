//go:build e2e

package e2e

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

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
	return nodeDo(t, http.MethodGet, path, token, nil)
}

// nodeDo sends one request to the node's API directly on its IP. target is sent exactly as
// given, encoded or not, dots and all.
func nodeDo(t *testing.T, method, target, token string, header http.Header) (int, string) {
	t.Helper()
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		// The serving certificate is the agent's self-signed one.
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true},
	}}
	req, err := http.NewRequest(method, nodeAPIURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	path, query, _ := strings.Cut(target, "?")
	req.URL.Opaque, req.URL.RawQuery = path, query
	for k, v := range header {
		req.Header[k] = v
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, target, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

var nodeAPIURL = fmt.Sprintf("https://%s:10250", harness.NodeIP)

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

// TestNodeAPISlowClientBlocksNoOne: followed logs that the client never reads stall only
// their own connections; the node keeps answering everything else.
func TestNodeAPISlowClientBlocksNoOne(t *testing.T) {
	t.Parallel()
	requireNodeagent(t)
	// 16 MB of log at once, far more than the socket buffers between a stalled client and
	// the agent can hold.
	pod := busyboxPod("slow-client", corev1.RestartPolicyAlways,
		`l=$(printf '%0999d' 0); yes "$l" | head -c 16000000; echo done; `+sleeperScript)
	pod = waitPod(t, createPod(t, pod), 2*time.Minute, runningAndReady)
	token, _ := serviceAccountToken(t, "nodeapi-slow", nodesProxy("get", "create"))
	logs := fmt.Sprintf("/containerLogs/%s/%s/main", podNS, pod.Name)
	framework.Eventually(t, time.Minute, func() error {
		if code, body := nodeGet(t, logs+"?tailLines=1", token); code != http.StatusOK || body != "done\n" {
			return fmt.Errorf("GET %s?tailLines=1: %d %.100q", logs, code, body)
		}
		return nil
	})

	// Clients that ask to follow the whole log and never read a byte, with the smallest
	// receive buffer the kernel allows.
	dialer := &net.Dialer{Timeout: 10 * time.Second, Control: func(_, _ string, rc syscall.RawConn) error {
		var err error
		if cerr := rc.Control(func(fd uintptr) { err = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF, 1024) }); cerr != nil {
			return cerr
		}
		return err
	}}
	var stalled []*tls.Conn
	for i := 0; i < 4; i++ {
		conn, err := tls.DialWithDialer(dialer, "tcp", harness.NodeIP+":10250", &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		if _, err := fmt.Fprintf(conn, "GET %s?follow=true HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\n\r\n", logs, harness.NodeIP, token); err != nil {
			t.Fatal(err)
		}
		stalled = append(stalled, conn)
	}

	// Everything else is answered at once, several times over.
	for i := 0; i < 3; i++ {
		start := time.Now()
		if code, body := nodeGet(t, "/healthz", token); code != http.StatusOK || body != "ok" {
			t.Errorf("GET /healthz beside stalled clients: %d %q", code, body)
		}
		if code, body := nodeGet(t, "/pods", token); code != http.StatusOK || !strings.Contains(body, pod.Name) {
			t.Errorf("GET /pods beside stalled clients: %d %.100q", code, body)
		}
		if code, body := nodeGet(t, logs+"?tailLines=1", token); code != http.StatusOK || body != "done\n" {
			t.Errorf("GET %s?tailLines=1 beside stalled clients: %d %.100q", logs, code, body)
		}
		if out := framework.Kubectl(t, "logs", pod.Name, "--tail=1"); out != "done\n" {
			t.Errorf("kubectl logs --tail=1 beside stalled clients = %q", out)
		}
		if out := framework.Kubectl(t, "exec", pod.Name, "--", "echo", "hi"); out != "hi\n" {
			t.Errorf("kubectl exec beside stalled clients = %q", out)
		}
		if d := time.Since(start); d > 20*time.Second {
			t.Errorf("a round of requests beside stalled clients took %s", d)
		}
	}

	// The stalled streams were live all along: the log is there to read.
	for _, conn := range stalled {
		_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatalf("read a stalled follow: %v", err)
		}
		line := make([]byte, 10)
		if resp.StatusCode != http.StatusOK {
			t.Errorf("stalled follow answered %d", resp.StatusCode)
		} else if _, err := io.ReadFull(resp.Body, line); err != nil || string(line) != "0000000000" {
			t.Errorf("stalled follow body starts %q, %v", line, err)
		}
	}
}
