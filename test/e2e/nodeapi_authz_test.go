//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/remotecommand"

	"github.com/nodeagent/nodeagent/test/e2e/framework"
)

// serviceAccountToken creates a service account bound to a new ClusterRole with rules (none:
// no binding) and returns a token for it. All of it goes with the test.
func serviceAccountToken(t *testing.T, prefix string, rules ...rbacv1.PolicyRule) (string, string) {
	t.Helper()
	cs := framework.Client(t)
	ctx := framework.Context(t, time.Minute)
	cleanupCtx := func() context.Context { return framework.Context(t, 10*time.Second) }
	sa, err := cs.CoreV1().ServiceAccounts(podNS).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.CoreV1().ServiceAccounts(podNS).Delete(cleanupCtx(), sa.Name, metav1.DeleteOptions{}) })
	if len(rules) > 0 {
		role, err := cs.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
			ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-"}, Rules: rules,
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cs.RbacV1().ClusterRoles().Delete(cleanupCtx(), role.Name, metav1.DeleteOptions{}) })
		binding := &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: role.Name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: podNS, Name: sa.Name}},
		}
		if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = cs.RbacV1().ClusterRoleBindings().Delete(cleanupCtx(), binding.Name, metav1.DeleteOptions{})
		})
	}
	tok, err := cs.CoreV1().ServiceAccounts(podNS).CreateToken(ctx, sa.Name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tok.Status.Token, sa.Name
}

func nodesProxy(verbs ...string) rbacv1.PolicyRule {
	return rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"nodes/proxy"}, Verbs: verbs}
}

// nodeExec runs cmd in a container through the node's API directly, over SPDY (POST) or
// WebSocket (GET), as token.
func nodeExec(ctx context.Context, token string, websocket bool, pod, container string, cmd ...string) (string, string, error) {
	cfg := &rest.Config{Host: nodeAPIURL, BearerToken: token, TLSClientConfig: rest.TLSClientConfig{Insecure: true}}
	q := url.Values{"command": cmd, "output": {"1"}, "error": {"1"}}
	u, err := url.Parse(fmt.Sprintf("%s/exec/%s/%s/%s?%s", nodeAPIURL, podNS, pod, container, q.Encode()))
	if err != nil {
		return "", "", err
	}
	var ex remotecommand.Executor
	if websocket {
		// The CRI streaming servers speak the channel protocols up to v4 over WebSocket;
		// v5 is the apiserver's, which it turns into SPDY towards nodes.
		ex, err = remotecommand.NewWebSocketExecutorForProtocols(cfg, http.MethodGet, u.String(), "v4.channel.k8s.io")
	} else {
		ex, err = remotecommand.NewSPDYExecutor(cfg, http.MethodPost, u)
	}
	if err != nil {
		return "", "", err
	}
	var stdout, stderr bytes.Buffer
	err = ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &stdout, Stderr: &stderr})
	return stdout.String(), stderr.String(), err
}

// upgradeHeader makes a request look like the WebSocket upgrade kubectl's exec sends; the
// node must authorize it as create although it is a GET.
var upgradeHeader = http.Header{
	"Connection":             {"Upgrade"},
	"Upgrade":                {"websocket"},
	"Sec-Websocket-Version":  {"13"},
	"Sec-Websocket-Key":      {"dGhlIHNhbXBsZSBub25jZQ=="},
	"Sec-Websocket-Protocol": {"v5.channel.k8s.io"},
}

// TestNodeAPIAuthorizationMatrix: logs and exec straight on the node's port, as no one, as an
// identity without nodes/proxy, with nodes/proxy get only (logs, not exec) and with get and
// create (both); and the apiserver refusing pods/exec to an identity without it.
func TestNodeAPIAuthorizationMatrix(t *testing.T) {
	t.Parallel()
	requireNodeagent(t)
	pod := waitPod(t, createPod(t, busyboxPod("authz", corev1.RestartPolicyAlways, "echo hello; "+sleeperScript)), 2*time.Minute, runningAndReady)
	noRBAC, noRBACName := serviceAccountToken(t, "nodeapi-none")
	proxyGet, _ := serviceAccountToken(t, "nodeapi-proxy-get", nodesProxy("get"))
	proxyAll, _ := serviceAccountToken(t, "nodeapi-proxy", nodesProxy("get", "create"))

	logs := fmt.Sprintf("/containerLogs/%s/%s/main", podNS, pod.Name)
	exec := fmt.Sprintf("/exec/%s/%s/main?command=id&output=1", podNS, pod.Name)
	attach := fmt.Sprintf("/attach/%s/%s/main?output=1", podNS, pod.Name)
	portForward := fmt.Sprintf("/portForward/%s/%s?port=80", podNS, pod.Name)
	podTimeline := fmt.Sprintf("/debug/pods/%s/%s/timeline", podNS, pod.Name)
	podWhy := fmt.Sprintf("/debug/pods/%s/%s/why", podNS, pod.Name)

	// Bindings reach the apiserver's authorizer through a watch: wait until both allowed
	// identities are let in (a denial is cached for 30 s: cacheUnauthorizedTTL).
	framework.Eventually(t, time.Minute, func() error {
		for _, tok := range []string{proxyGet, proxyAll} {
			if code, body := nodeGet(t, logs, tok); code != http.StatusOK || body != "hello\n" {
				return fmt.Errorf("GET %s with nodes/proxy get: %d %q", logs, code, body)
			}
		}
		return nil
	})

	tests := []struct {
		name, method, target, token string
		header                      http.Header
		code                        int
	}{
		{name: "anonymous logs", method: "GET", target: logs, code: 401},
		{name: "anonymous exec", method: "POST", target: exec, code: 401},
		{name: "anonymous websocket exec", method: "GET", target: exec, header: upgradeHeader, code: 401},
		{name: "anonymous port-forward", method: "POST", target: portForward, code: 401},
		{name: "no RBAC logs", method: "GET", target: logs, token: noRBAC, code: 403},
		{name: "no RBAC exec", method: "POST", target: exec, token: noRBAC, code: 403},
		{name: "no RBAC websocket exec", method: "GET", target: exec, token: noRBAC, header: upgradeHeader, code: 403},
		{name: "no RBAC attach", method: "POST", target: attach, token: noRBAC, code: 403},
		{name: "no RBAC port-forward", method: "POST", target: portForward, token: noRBAC, code: 403},
		{name: "no RBAC running pods", method: "GET", target: "/runningpods/", token: noRBAC, code: 403},
		{name: "proxy get logs", method: "GET", target: logs, token: proxyGet, code: 200},
		{name: "proxy get exec", method: "POST", target: exec, token: proxyGet, code: 403},
		{name: "proxy get websocket exec is create", method: "GET", target: exec, token: proxyGet, header: upgradeHeader, code: 403},
		{name: "proxy get websocket attach is create", method: "GET", target: attach, token: proxyGet, header: upgradeHeader, code: 403},
		{name: "proxy get websocket port-forward is create", method: "GET", target: portForward, token: proxyGet, header: upgradeHeader, code: 403},
		{name: "proxy get running pods", method: "GET", target: "/runningpods/", token: proxyGet, code: 200},
		{name: "proxy logs", method: "GET", target: logs, token: proxyAll, code: 200},
		{name: "anonymous timeline", method: "GET", target: podTimeline, code: 401},
		{name: "no RBAC timeline", method: "GET", target: podTimeline, token: noRBAC, code: 403},
		{name: "no RBAC why", method: "GET", target: podWhy, token: noRBAC, code: 403},
		{name: "proxy get timeline", method: "GET", target: podTimeline, token: proxyGet, code: 200},
		{name: "proxy get why", method: "GET", target: podWhy, token: proxyGet, code: 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, body := nodeDo(t, tt.method, tt.target, tt.token, tt.header)
			if code != tt.code {
				t.Fatalf("%s %s = %d %q, want %d", tt.method, tt.target, code, body, tt.code)
			}
			switch code {
			case 403:
				if !strings.Contains(body, "Forbidden") || !strings.Contains(body, "proxy") {
					t.Errorf("403 body %q does not name the subresource", body)
				}
			case 200:
				if strings.HasPrefix(tt.target, "/containerLogs") && body != "hello\n" {
					t.Errorf("logs = %q, want hello", body)
				}
			}
		})
	}

	ctx := framework.Context(t, time.Minute)
	for _, websocket := range []bool{false, true} {
		name := map[bool]string{false: "SPDY", true: "WebSocket"}[websocket]
		t.Run("exec over "+name+" with nodes/proxy create", func(t *testing.T) {
			out, errOut, err := nodeExec(ctx, proxyAll, websocket, pod.Name, "main", "sh", "-c", "echo out; echo err >&2")
			if err != nil || out != "out\n" || errOut != "err\n" {
				t.Errorf("exec = stdout %q, stderr %q, %v; want out and err", out, errOut, err)
			}
			_, _, err = nodeExec(ctx, proxyAll, websocket, pod.Name, "main", "sh", "-c", "exit 7")
			if err == nil || !strings.Contains(err.Error(), "exit code 7") {
				t.Errorf("exec of exit 7: %v, want exit code 7", err)
			}
		})
		t.Run("exec over "+name+" with nodes/proxy get", func(t *testing.T) {
			if _, _, err := nodeExec(ctx, proxyGet, websocket, pod.Name, "main", "id"); err == nil {
				t.Error("exec with nodes/proxy get only succeeded")
			}
		})
	}

	t.Run("apiserver refuses pods/exec", func(t *testing.T) {
		rc, err := clientcmd.BuildConfigFromFlags("", framework.Cluster(t).Kubeconfig())
		if err != nil {
			t.Fatal(err)
		}
		kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
		doc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: %q, insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: %q}}]
contexts: [{name: c, context: {cluster: c, user: u, namespace: %s}}]
current-context: c
`, rc.Host, noRBAC, podNS)
		if err := os.WriteFile(kubeconfig, []byte(doc), 0o600); err != nil {
			t.Fatal(err)
		}
		out, errOut, code := kubectlExitCode(t, nil, "--kubeconfig="+kubeconfig, "exec", pod.Name, "--", "id")
		if code == 0 || !strings.Contains(errOut, "forbidden") || !strings.Contains(errOut, noRBACName) {
			t.Errorf("kubectl exec as %s without RBAC = %q, stderr %q, exit %d; want forbidden", noRBACName, out, errOut, code)
		}
	})
}

// TestNodeAPIRefusesBadRequests: path traversal in any path parameter is refused without
// revealing a host file, malformed queries are 400, and unknown pods or containers are 404
// with a message. All as an identity allowed everything on nodes/proxy.
func TestNodeAPIRefusesBadRequests(t *testing.T) {
	t.Parallel()
	requireNodeagent(t)
	pod := waitPod(t, createPod(t, busyboxPod("badreq", corev1.RestartPolicyAlways, "echo secret-log-line; "+sleeperScript)), 2*time.Minute, runningAndReady)
	token, _ := serviceAccountToken(t, "nodeapi-badreq", nodesProxy("get", "create"))
	logs := fmt.Sprintf("/containerLogs/%s/%s/main", podNS, pod.Name)
	framework.Eventually(t, time.Minute, func() error {
		if code, body := nodeGet(t, logs, token); code != http.StatusOK || body != "secret-log-line\n" {
			return fmt.Errorf("GET %s: %d %q", logs, code, body)
		}
		return nil
	})

	p := pod.Name
	traversals := []struct{ method, target string }{
		{"GET", "/containerLogs/..%2f..%2fetc/passwd/x/y"},
		{"GET", "/containerLogs/../../etc/passwd/x/y"},
		{"GET", "/containerLogs/default/..%2f..%2f..%2f..%2fetc%2fpasswd/main"},
		{"GET", "/containerLogs/default/" + p + "/.."},
		{"GET", "/containerLogs/default/" + p + "/%2e%2e"},
		{"GET", "/containerLogs/default/../" + p + "/main"},
		{"GET", "/containerLogs/%2e%2e/" + p + "/main"},
		{"GET", "/containerLogs/default/" + p + "/main/../../../../../etc/passwd"},
		{"GET", "/containerLogs/default/" + p + "/main%2f..%2f..%2f..%2f..%2f..%2fetc%2fpasswd"},
		{"GET", "/containerLogs/default/" + p + "/..%2f..%2f..%2f..%2f..%2fetc%2fpasswd"},
		{"GET", "/containerLogs/default/" + p + "/%2e%2e%2f%2e%2e%2fetc%2fpasswd"},
		{"GET", "/containerLogs/default/" + p + "%2f..%2f..%2f/main"},
		{"GET", "/containerLogs/default/" + p + "/main%00"},
		{"GET", "/containerLogs/default/" + p + "/.%2e/.%2e/.%2e/etc/passwd"},
		{"GET", "/containerLogs//" + p + "/main"},
		{"GET", "/containerLogs/default/" + p + "/main/"},
		{"POST", "/exec/default/" + p + "/..%2f..%2fbin%2fsh?command=id&output=1"},
		{"POST", "/exec/..%2f..%2f/" + p + "/main?command=id&output=1"},
		{"GET", "/exec/default/" + p + "/../main?command=id&output=1"},
		{"POST", "/attach/default/" + p + "/%2e%2e?output=1"},
		{"POST", "/portForward/..%2f..%2fetc/passwd?port=80"},
		{"POST", "/portForward/default/" + p + "/..?port=80"},
		{"POST", "/run/default/" + p + "/..%2fmain?cmd=id"},
		{"GET", "/logs/..%2f..%2fetc/passwd"},
		{"GET", "/pods/../../etc/passwd"},
	}
	for _, tt := range traversals {
		code, body := nodeDo(t, tt.method, tt.target, token, nil)
		if code != http.StatusBadRequest && code != http.StatusNotFound {
			t.Errorf("%s %s = %d %.200q, want 400 or 404", tt.method, tt.target, code, body)
		}
		if strings.Contains(body, "root:") || strings.Contains(body, "secret-log-line") {
			t.Errorf("%s %s revealed a file: %.300q", tt.method, tt.target, body)
		}
	}

	badQueries := []struct{ target, want string }{
		{logs + "?tailLines=abc", "tailLines"},
		{logs + "?tailLines=-1", "tailLines"},
		{logs + "?sinceSeconds=-1", "sinceSeconds"},
		{logs + "?sinceSeconds=abc", "sinceSeconds"},
		{logs + "?limitBytes=0", "limitBytes"},
		{logs + "?sinceTime=yesterday", "sinceTime"},
		{logs + "?sinceTime=2020-01-01T00:00:00Z&sinceSeconds=5", "sinceTime"},
		{logs + "?follow=perhaps", "follow"},
		{logs + "?previous=2", "previous"},
		{logs + "?timestamps=x", "timestamps"},
		{logs + "?stream=Both", "stream"},
	}
	for _, tt := range badQueries {
		code, body := nodeGet(t, tt.target, token)
		if code != http.StatusBadRequest || !strings.Contains(body, tt.want) {
			t.Errorf("GET %s = %d %q, want 400 naming %s", tt.target, code, body, tt.want)
		}
	}

	notFound := []struct{ method, target, want string }{
		{"GET", "/containerLogs/default/no-such-pod/main", "no-such-pod"},
		{"GET", "/containerLogs/no-such-ns/" + p + "/main", "no-such-ns"},
		{"GET", "/containerLogs/default/" + p + "/no-such-container", "no-such-container"},
		{"GET", "/containerLogs/default/" + p + "/main?previous=false&tailLines=1&follow=false", ""},
		{"POST", "/exec/default/no-such-pod/main?command=id&output=1", "no-such-pod"},
		{"POST", "/run/default/" + p + "/no-such-container?cmd=id", "no-such-container"},
	}
	for _, tt := range notFound {
		code, body := nodeDo(t, tt.method, tt.target, token, upgradeHeaderFor(tt.method))
		if tt.want == "" {
			// The same path with valid options, as a control.
			if code != http.StatusOK || body != "secret-log-line\n" {
				t.Errorf("%s %s = %d %q, want the log", tt.method, tt.target, code, body)
			}
			continue
		}
		if code != http.StatusNotFound || !strings.Contains(body, tt.want) || !strings.Contains(body, "not found") {
			t.Errorf("%s %s = %d %q, want 404 saying %s is not found", tt.method, tt.target, code, body, tt.want)
		}
	}
	// kubectl shows the node's message.
	if _, err := framework.KubectlErr(t, "logs", p, "-c", "no-such-container"); err == nil || !strings.Contains(err.Error(), "no-such-container") {
		t.Errorf("kubectl logs -c no-such-container: %v, want an error naming the container", err)
	}
}

// upgradeHeaderFor gives a POST the upgrade headers of a SPDY stream request, so that a 404
// is about the pod or container, not about a missing upgrade.
func upgradeHeaderFor(method string) http.Header {
	if method != http.MethodPost {
		return nil
	}
	return http.Header{"Connection": {"Upgrade"}, "Upgrade": {"SPDY/3.1"}, "X-Stream-Protocol-Version": {"v4.channel.k8s.io"}}
}
