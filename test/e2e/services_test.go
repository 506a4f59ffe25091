//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nodeagent/nodeagent/test/e2e/framework"
	"github.com/nodeagent/nodeagent/test/harness"
)

// Ports of the netexec backends and of the Services in front of them.
const (
	netexecHTTP = 8080
	netexecUDP  = 8081
	svcTCPPort  = 80
	svcUDPPort  = 90
)

// requireServices fails a test that needs kube-proxy and CoreDNS on a cluster without them.
func requireServices(t *testing.T) {
	t.Helper()
	if !framework.Cluster(t).Services {
		t.Fatal("the cluster has no kube-proxy and CoreDNS (harness.Config.Services)")
	}
}

// netexecPod runs agnhost netexec (HTTP on 8080, UDP on 8081), labelled app=<name>: a
// Service backend that answers "hostname" with its pod name, and a client whose /dial
// sends a request over UDP or TCP from inside the pod and reports the answers.
func netexecPod(t *testing.T, ns, name string) *corev1.Pod {
	t.Helper()
	grace := int64(1)
	pod := createPod(t, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"app": name}},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: &grace,
			Containers: []corev1.Container{{
				Name: "netexec", Image: harness.AgnhostImage,
				Args: []string{"netexec", "--http-port=" + strconv.Itoa(netexecHTTP), "--udp-port=" + strconv.Itoa(netexecUDP)},
				Ports: []corev1.ContainerPort{
					{Name: "http", ContainerPort: netexecHTTP, Protocol: corev1.ProtocolTCP},
					{Name: "udp", ContainerPort: netexecUDP, Protocol: corev1.ProtocolUDP},
				},
				// In the Service's endpoints only once it listens.
				ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{
					HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromString("http")}},
					PeriodSeconds: 1},
			}},
		},
	})
	return waitPod(t, pod, 2*time.Minute, runningAndReady)
}

// createService creates svc in ns and returns it with its addresses assigned.
func createService(t *testing.T, ns string, svc *corev1.Service) *corev1.Service {
	t.Helper()
	svc.Namespace = ns
	created, err := framework.Client(t).CoreV1().Services(ns).Create(framework.Context(t, 30*time.Second), svc, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create service %s: %v", svc.Name, err)
	}
	return created
}

// backendService is a Service of type typ in front of the netexec pods labelled app=app:
// port 80/TCP to their HTTP port, 90/UDP to their UDP port.
func backendService(name, app string, typ corev1.ServiceType) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.ServiceSpec{
			Type:     typ,
			Selector: map[string]string{"app": app},
			Ports: []corev1.ServicePort{
				{Name: "http", Port: svcTCPPort, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(netexecHTTP)},
				{Name: "udp", Port: svcUDPPort, Protocol: corev1.ProtocolUDP, TargetPort: intstr.FromInt32(netexecUDP)},
			},
		},
	}
}

// dial asks the netexec client pod to send "hostname" to host:port over protocol (http or
// udp) and returns the first answer.
func dial(t *testing.T, client *corev1.Pod, protocol, host string, port int32) (string, error) {
	t.Helper()
	url := fmt.Sprintf("http://127.0.0.1:%d/dial?request=hostname&protocol=%s&host=%s&port=%d&tries=1", netexecHTTP, protocol, host, port)
	out, err := podExec(t, client, "netexec", "curl", "-sS", "-m", "10", url)
	if err != nil {
		return "", err
	}
	var res struct {
		Responses []string `json:"responses"`
		Errors    []string `json:"errors"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		return "", fmt.Errorf("dial answered %q: %w", out, err)
	}
	if len(res.Responses) == 0 {
		return "", fmt.Errorf("no answer from %s %s:%d: %v", protocol, host, port, res.Errors)
	}
	return res.Responses[0], nil
}

// expectAnswer polls get until it returns want.
func expectAnswer(t *testing.T, what, want string, get func() (string, error)) {
	t.Helper()
	framework.Eventually(t, time.Minute, func() error {
		got, err := get()
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		if strings.TrimSpace(got) != want {
			return fmt.Errorf("%s answered %q, want %q", what, got, want)
		}
		return nil
	})
}

// TestServiceClusterIP: a pod reaches another pod through a ClusterIP Service over TCP
// and over UDP, the answer coming from the backend.
func TestServiceClusterIP(t *testing.T) {
	t.Parallel()
	requireServices(t)
	ns := newNamespace(t, "svc-clusterip")
	backend := netexecPod(t, ns, "backend")
	client := netexecPod(t, ns, "client")
	svc := createService(t, ns, backendService("backend", "backend", corev1.ServiceTypeClusterIP))
	ip := svc.Spec.ClusterIP
	if net.ParseIP(ip) == nil || !strings.HasPrefix(ip, "10.96.") {
		t.Fatalf("ClusterIP %q, want one of %s", ip, harness.ServiceCIDR)
	}
	expectAnswer(t, "TCP "+ip, backend.Name, func() (string, error) {
		return podExec(t, client, "netexec", "curl", "-sS", "-m", "5", fmt.Sprintf("http://%s:%d/hostname", ip, svcTCPPort))
	})
	expectAnswer(t, "UDP "+ip, backend.Name, func() (string, error) { return dial(t, client, "udp", ip, svcUDPPort) })
}

// TestServiceKubernetesFromPod: the kubernetes Service (10.96.0.1:443) leads a pod to the
// apiserver, whose certificate it verifies with its service account's CA, and which
// knows the pod's token.
func TestServiceKubernetesFromPod(t *testing.T) {
	t.Parallel()
	requireServices(t)
	ns := newNamespace(t, "svc-kubernetes")
	client := netexecPod(t, ns, "client")
	version, err := harness.KubeVersion(framework.Cluster(t).RepoDir)
	if err != nil {
		t.Fatal(err)
	}
	const sa = "/var/run/secrets/kubernetes.io/serviceaccount"
	framework.Eventually(t, time.Minute, func() error {
		out, err := podExec(t, client, "netexec", "curl", "-sS", "-m", "5", "--cacert", sa+"/ca.crt",
			"https://"+harness.KubernetesSvc+":443/version")
		if err != nil {
			return err
		}
		var v struct {
			GitVersion string `json:"gitVersion"`
		}
		if err := json.Unmarshal([]byte(out), &v); err != nil || v.GitVersion != version {
			return fmt.Errorf("/version through %s answered %q (%v), want gitVersion %s", harness.KubernetesSvc, out, err, version)
		}
		return nil
	})
	// Authenticated as the pod's service account: a list it may not make is refused by
	// name, which only the apiserver can know.
	out, err := podExec(t, client, "netexec", "sh", "-c",
		`curl -sS -m 5 --cacert `+sa+`/ca.crt -H "Authorization: Bearer $(cat `+sa+`/token)" https://`+harness.KubernetesSvc+`/api/v1/nodes`)
	if err != nil {
		t.Fatalf("list nodes as the pod: %v", err)
	}
	if want := "system:serviceaccount:" + ns + ":default"; !strings.Contains(out, want) {
		t.Errorf("the apiserver's answer does not name %s:\n%s", want, out)
	}
}

// TestClusterDNS: a pod with the default dnsPolicy resolves, through CoreDNS at the
// cluster DNS address, the kubernetes Service and a ClusterIP Service to their ClusterIPs
// and a headless Service to its pod's IP by their full names, and a Service of its own
// namespace by its short name (the search path of its resolv.conf).
func TestClusterDNS(t *testing.T) {
	t.Parallel()
	requireServices(t)
	ns := newNamespace(t, "svc-dns")
	backend := netexecPod(t, ns, "backend")
	svc := createService(t, ns, backendService("backend", "backend", corev1.ServiceTypeClusterIP))
	headless := backendService("db", "backend", corev1.ServiceTypeClusterIP)
	headless.Spec.ClusterIP = corev1.ClusterIPNone
	createService(t, ns, headless)
	// agnhost's image has busybox's nslookup, and a curl that resolves through libc.
	client := netexecPod(t, ns, "client")
	if out := mustExec(t, client, "netexec", "cat", "/etc/resolv.conf"); !strings.Contains(out, "nameserver "+harness.ClusterDNS) {
		t.Fatalf("resolv.conf does not name %s:\n%s", harness.ClusterDNS, out)
	}
	tests := []struct{ name, want string }{
		{"kubernetes.default.svc." + harness.ClusterDomain, harness.KubernetesSvc},
		{"backend." + ns + ".svc." + harness.ClusterDomain, svc.Spec.ClusterIP},
		{"db." + ns + ".svc." + harness.ClusterDomain, backend.Status.PodIP},
	}
	for _, tt := range tests {
		framework.Eventually(t, time.Minute, func() error {
			// busybox's nslookup asks the first nameserver of resolv.conf, and ignores the
			// search path: full names only.
			out, err := podExec(t, client, "netexec", "nslookup", "-type=a", tt.name)
			if err != nil {
				return fmt.Errorf("nslookup %s: %w\n%s", tt.name, err, out)
			}
			if !strings.Contains(out, harness.ClusterDNS) {
				return fmt.Errorf("nslookup %s did not ask %s:\n%s", tt.name, harness.ClusterDNS, out)
			}
			if got := nslookupAddresses(out); len(got) != 1 || got[0] != tt.want {
				return fmt.Errorf("nslookup %s: addresses %v, want [%s]\n%s", tt.name, got, tt.want, out)
			}
			return nil
		})
	}
	expectAnswer(t, "http://backend (short name)", backend.Name, func() (string, error) {
		return podExec(t, client, "netexec", "curl", "-sS", "-m", "5", "http://backend/hostname")
	})
}

// nslookupAddresses returns the addresses of the answer in busybox nslookup's output (the
// lines after the server's own).
func nslookupAddresses(out string) []string {
	var addrs []string
	answer := false
	for _, line := range strings.Split(out, "\n") {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "Name:") {
			answer = true
			continue
		}
		if v, ok := strings.CutPrefix(line, "Address:"); ok && answer {
			addrs = append(addrs, strings.TrimSpace(v))
		}
	}
	return addrs
}

// TestServiceNodePort: a NodePort Service answers on the node IP, from this machine and
// from a pod, and not on localhost.
func TestServiceNodePort(t *testing.T) {
	t.Parallel()
	requireServices(t)
	ns := newNamespace(t, "svc-nodeport")
	backend := netexecPod(t, ns, "backend")
	client := netexecPod(t, ns, "client")
	svc := createService(t, ns, backendService("backend", "backend", corev1.ServiceTypeNodePort))
	var tcpPort, udpPort int32
	for _, p := range svc.Spec.Ports {
		switch p.Protocol {
		case corev1.ProtocolTCP:
			tcpPort = p.NodePort
		case corev1.ProtocolUDP:
			udpPort = p.NodePort
		}
	}
	if tcpPort == 0 || udpPort == 0 {
		t.Fatalf("no node ports allocated: %+v", svc.Spec.Ports)
	}
	url := fmt.Sprintf("http://%s/hostname", net.JoinHostPort(harness.NodeIP, strconv.Itoa(int(tcpPort))))
	expectAnswer(t, "TCP node port from the machine", backend.Name, func() (string, error) { return httpGetBody(url) })
	expectAnswer(t, "TCP node port from a pod", backend.Name, func() (string, error) {
		return podExec(t, client, "netexec", "curl", "-sS", "-m", "5", url)
	})
	expectAnswer(t, "UDP node port from a pod", backend.Name, func() (string, error) {
		return dial(t, client, "udp", harness.NodeIP, udpPort)
	})
	// Only there: kube-proxy's nodePortAddresses leave localhost out, so that it needs no
	// route_localnet.
	if conn, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(int(tcpPort))), 2*time.Second); err == nil {
		conn.Close()
		t.Errorf("the node port %d answers on 127.0.0.1 too", tcpPort)
	}
}

func httpGetBody(url string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %s: %s", url, resp.Status, body)
	}
	return string(body), err
}
