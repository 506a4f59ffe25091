//go:build e2e

// Package multinode brings up a cluster of two nodes (NODES=2: the second in namespaces
// of its own, each node with its own containerd and nodeagent making its pod network with
// --pod-network=bridge) and checks what only several nodes show: pod-to-pod traffic across
// nodes by pod IP, hostPorts that do not collide, routes that follow the Nodes, and
// Services through each node's kube-proxy.
//
// The tests run in order, not in parallel: the last one takes the second node away.
package multinode

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nodeagent/nodeagent/test/e2e/framework"
	"github.com/nodeagent/nodeagent/test/harness"
)

func TestMain(m *testing.M) {
	framework.MainWith(m, &harness.Config{NodeCount: 2, Services: true})
}

const ns = "default"

func nodes(t *testing.T) (first, second harness.Node) {
	t.Helper()
	all := framework.Cluster(t).Nodes()
	if len(all) != 2 {
		t.Fatalf("%d nodes, want 2", len(all))
	}
	return all[0], all[1]
}

func TestNodesReady(t *testing.T) {
	framework.ReadyNodes(t)
}

// netexec is agnhost's netexec on node n: HTTP on 8080 (/hostname, /clientip) and UDP on
// 8081 (answers "hostname" with its hostname).
func netexec(name string, n harness.Node, hostPort int32) *corev1.Pod {
	port := corev1.ContainerPort{ContainerPort: 8080, Protocol: corev1.ProtocolTCP}
	if hostPort != 0 {
		port.HostPort = hostPort
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"app": name}},
		Spec: corev1.PodSpec{
			NodeName: n.Name,
			Containers: []corev1.Container{{
				Name: "netexec", Image: harness.AgnhostImage,
				Args:  []string{"netexec", "--http-port=8080", "--udp-port=8081"},
				Ports: []corev1.ContainerPort{port, {ContainerPort: 8081, Protocol: corev1.ProtocolUDP}},
				ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{
					HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(8080)}}, PeriodSeconds: 1},
			}},
		},
	}
}

func inCIDR(t *testing.T, ip, cidr string) bool {
	t.Helper()
	_, block, err := net.ParseCIDR(cidr)
	if err != nil {
		t.Fatal(err)
	}
	return block.Contains(net.ParseIP(ip))
}

// TestPodToPodAcrossNodes: pods on different nodes reach each other by pod IP, TCP and
// UDP, both ways, and see each other's pod IP as the source (no masquerade inside the
// cluster CIDR). The client is agnhost's netexec too: its /dial endpoint makes the call
// from inside the client pod and reports what the server answered.
func TestPodToPodAcrossNodes(t *testing.T) {
	first, second := nodes(t)
	cs := framework.Client(t)
	ctx := framework.Context(t, time.Minute)
	for _, dir := range []struct{ from, to harness.Node }{{first, second}, {second, first}} {
		t.Run(dir.from.Name+"-to-"+dir.to.Name, func(t *testing.T) {
			srvName, cliName := "srv-"+shortName(dir.to), "cli-"+shortName(dir.from)
			srv := framework.RunReady(t, netexec(srvName, dir.to, 0))
			cli := framework.RunReady(t, netexec(cliName, dir.from, 0))
			for _, p := range []*corev1.Pod{srv, cli} {
				node, err := cs.CoreV1().Nodes().Get(ctx, p.Spec.NodeName, metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				if !inCIDR(t, p.Status.PodIP, node.Spec.PodCIDR) {
					t.Errorf("pod %s has IP %s, outside its node %s's pod CIDR %s", p.Name, p.Status.PodIP, node.Name, node.Spec.PodCIDR)
				}
			}
			dial := func(protocol string, port int, request string) (string, error) {
				return netexecDial(cli, protocol, srv.Status.PodIP, port, request)
			}
			if out, err := dial("http", 8080, "hostname"); err != nil || out != srvName {
				t.Errorf("TCP to %s on %s: %q, %v; want %q", srv.Status.PodIP, dir.to.Name, out, err, srvName)
			}
			out, err := dial("http", 8080, "clientip")
			if host, _, _ := net.SplitHostPort(out); err != nil || host != cli.Status.PodIP {
				t.Errorf("the server on %s saw the client as %q (%v), want its pod IP %s", dir.to.Name, out, err, cli.Status.PodIP)
			}
			if out, err := dial("udp", 8081, "hostname"); err != nil || out != srvName {
				t.Errorf("UDP to %s on %s: %q, %v; want %q", srv.Status.PodIP, dir.to.Name, out, err, srvName)
			}
		})
	}
}

// netexecDial has the netexec pod client call host:port over protocol (http or udp) with
// request (hostname, clientip), from inside its pod, and returns what the server answered.
func netexecDial(client *corev1.Pod, protocol, host string, port int, request string) (string, error) {
	url := fmt.Sprintf("http://%s:8080/dial?request=%s&protocol=%s&host=%s&port=%d&tries=1",
		client.Status.PodIP, request, protocol, host, port)
	body, err := httpGet(url)
	if err != nil {
		return "", err
	}
	var got struct {
		Responses []string `json:"responses"`
		Errors    []string `json:"errors"`
	}
	if err := json.Unmarshal([]byte(body), &got); err != nil {
		return "", fmt.Errorf("%s: %q: %w", url, body, err)
	}
	if len(got.Responses) != 1 {
		return "", fmt.Errorf("%s: responses %q, errors %q", url, got.Responses, got.Errors)
	}
	return got.Responses[0], nil
}

// TestHostPortOnBothNodes: the same hostPort on both nodes: both pods run, and each node's
// IP answers with its own pod.
func TestHostPortOnBothNodes(t *testing.T) {
	first, second := nodes(t)
	const hostPort = 18090
	for _, n := range []harness.Node{first, second} {
		framework.RunReady(t, netexec("hostport-"+shortName(n), n, hostPort))
	}
	for _, n := range []harness.Node{first, second} {
		want := "hostport-" + shortName(n)
		url := fmt.Sprintf("http://%s:%d/hostname", n.IP, hostPort)
		framework.Eventually(t, time.Minute, func() error {
			got, err := httpGet(url)
			if err != nil {
				return err
			}
			if got != want {
				return fmt.Errorf("GET %s = %q, want %q", url, got, want)
			}
			return nil
		})
	}
}

func shortName(n harness.Node) string { return fmt.Sprintf("n%d", n.Index+1) }

func httpGet(url string) (string, error) {
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return strings.TrimSpace(string(body)), err
}

// TestNodeGoneRouteGone takes the second node away: with its agent stopped and its Node
// deleted, the first node's agent removes its route to the second node's pod CIDR.
func TestNodeGoneRouteGone(t *testing.T) {
	cfg := framework.Cluster(t)
	_, second := nodes(t)
	ctx := framework.Context(t, 2*time.Minute)
	cs := framework.Client(t)
	node, err := cs.CoreV1().Nodes().Get(ctx, second.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cidr := node.Spec.PodCIDR
	route := func() string {
		out, _ := exec.Command("ip", "route", "show", cidr).Output()
		return strings.TrimSpace(string(out))
	}
	if r := route(); !strings.Contains(r, "via "+second.IP) {
		t.Fatalf("route to %s's pod CIDR %s in the first node's namespace: %q, want one via %s", second.Name, cidr, r, second.IP)
	}
	if err := cfg.StopNodeAgent(ctx, second); err != nil {
		t.Fatal(err)
	}
	if err := cs.CoreV1().Nodes().Delete(ctx, second.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	framework.Eventually(t, time.Minute, func() error {
		if r := route(); r != "" {
			return fmt.Errorf("route to the deleted node's pod CIDR still there: %q", r)
		}
		return nil
	})
}
