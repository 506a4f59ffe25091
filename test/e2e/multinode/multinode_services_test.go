//go:build e2e

package multinode

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nodeagent/nodeagent/test/e2e/framework"
	"github.com/nodeagent/nodeagent/test/harness"
)

// TestServicesAcrossNodes: with a kube-proxy on each node, a pod on the second node
// reaches a backend on the first through a ClusterIP Service, by its ClusterIP and by its
// name (CoreDNS, on whichever node it runs, behind its own Service), and a NodePort
// answers on the second node's IP with the backend on the first. (Its file name sorts
// before multinode_test.go, whose last test takes the second node away.)
func TestServicesAcrossNodes(t *testing.T) {
	if !framework.Cluster(t).Services {
		t.Fatal("the cluster has no kube-proxy and CoreDNS (harness.Config.Services)")
	}
	first, second := nodes(t)
	backend := framework.RunReady(t, netexec("svc-backend", first, 0))
	client := framework.RunReady(t, netexec("svc-client", second, 0))
	ctx := framework.Context(t, time.Minute)
	cs := framework.Client(t)
	svc, err := cs.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "svc-backend"},
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeNodePort,
			Selector: map[string]string{"app": backend.Labels["app"]},
			Ports:    []corev1.ServicePort{{Port: 80, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(8080)}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.CoreV1().Services(ns).Delete(context.Background(), svc.Name, metav1.DeleteOptions{}) })

	// The client's netexec makes the call from inside its pod, on the second node.
	dialFromClient := func(host string) (string, error) {
		return netexecDial(client, "http", host, 80, "hostname")
	}
	for _, host := range []string{svc.Spec.ClusterIP, svc.Name + "." + ns + ".svc." + harness.ClusterDomain} {
		framework.Eventually(t, time.Minute, func() error {
			got, err := dialFromClient(host)
			if err != nil {
				return err
			}
			if got != backend.Name {
				return fmt.Errorf("%s from %s answered %q, want %q", host, second.Name, got, backend.Name)
			}
			return nil
		})
	}
	url := fmt.Sprintf("http://%s:%d/hostname", second.IP, svc.Spec.Ports[0].NodePort)
	framework.Eventually(t, time.Minute, func() error {
		got, err := httpGet(url)
		if err != nil {
			return err
		}
		if got != backend.Name {
			return fmt.Errorf("GET %s = %q, want %q (the backend on %s)", url, got, backend.Name, first.Name)
		}
		return nil
	})
}

// TestNodePortBackToItsNode: a pod on the second node calls the first node's NodePort of a
// Service whose only endpoint is back on the second node. The first node forwards the
// connection out the way it came, masqueraded; the conformance spec "session affinity
// work for NodePort service" takes this path whenever affinity picks such an endpoint.
func TestNodePortBackToItsNode(t *testing.T) {
	if !framework.Cluster(t).Services {
		t.Fatal("the cluster has no kube-proxy and CoreDNS (harness.Config.Services)")
	}
	first, second := nodes(t)
	backend := framework.RunReady(t, netexec("np-backend", second, 0))
	client := framework.RunReady(t, netexec("np-client", second, 0))
	ctx := framework.Context(t, time.Minute)
	cs := framework.Client(t)
	svc, err := cs.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "np-backend"},
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeNodePort,
			Selector: map[string]string{"app": backend.Labels["app"]},
			Ports:    []corev1.ServicePort{{Port: 80, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(8080)}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.CoreV1().Services(ns).Delete(context.Background(), svc.Name, metav1.DeleteOptions{}) })
	port := int(svc.Spec.Ports[0].NodePort)
	framework.Eventually(t, time.Minute, func() error {
		got, err := netexecDial(client, "http", first.IP, port, "hostname")
		if err != nil {
			return err
		}
		if got != backend.Name {
			return fmt.Errorf("%s:%d from %s answered %q, want %q", first.IP, port, second.Name, got, backend.Name)
		}
		return nil
	})
}
