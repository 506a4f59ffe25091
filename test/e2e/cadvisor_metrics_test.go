//go:build e2e

package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nodeagent/nodeagent/test/e2e/framework"
)

// TestCadvisorMetrics scrapes /metrics/cadvisor through the apiserver's
// node proxy, as Prometheus does for the kube-prometheus dashboards, and
// finds the series of a running pod: its container's (container label
// set, name the runtime's ID, the image), the pod cgroup's (container
// ""), and the machine's (id "/").
func TestCadvisorMetrics(t *testing.T) {
	t.Parallel()
	requireNodeagent(t)
	ns := newNamespace(t, "cadvisor")
	burner, holder := statsPods(t, ns)

	framework.Eventually(t, 2*time.Minute, func() error {
		out, err := framework.KubectlErr(t, nodeProxy("/metrics/cadvisor")...)
		if err != nil {
			return err
		}
		m, err := samples(out)
		if err != nil {
			return fmt.Errorf("parse /metrics/cadvisor: %w", err)
		}
		if s, err := sampleOf(m, "container_scrape_error", nil); err != nil || s.Value != 0 {
			return fmt.Errorf("container_scrape_error = %v, %v", s, err)
		}
		for _, name := range []string{"machine_cpu_cores", "machine_memory_bytes"} {
			if s, err := sampleOf(m, name, nil); err != nil || s.Value <= 0 {
				return fmt.Errorf("%s = %v, %v", name, s, err)
			}
		}
		root := map[string]string{"id": "/", "container": "", "pod": "", "namespace": ""}
		if s, err := sampleOf(m, "container_cpu_usage_seconds_total", root); err != nil || s.Value <= 0 {
			return fmt.Errorf("root cpu = %v, %v", s, err)
		}

		burn := map[string]string{"container": "burn", "pod": burner.Name, "namespace": ns}
		s, err := sampleOf(m, "container_cpu_usage_seconds_total", burn)
		if err != nil || s.Value <= 0 || s.Metric["cpu"] != "total" {
			return fmt.Errorf("burn cpu = %v, %v", s, err)
		}
		if s.Metric["name"] == "" || s.Metric["image"] == "" || !strings.Contains(string(s.Metric["id"]), string(burner.UID)) &&
			!strings.Contains(string(s.Metric["id"]), strings.ReplaceAll(string(burner.UID), "-", "_")) {
			return fmt.Errorf("burn cpu labels %v: want the runtime's ID as name, the image, and an id below the pod's cgroup", s.Metric)
		}
		// A CPU limit of 200m is a quota of 20000us per 100000us.
		if s, err := sampleOf(m, "container_spec_cpu_quota", burn); err != nil || s.Value != 20000 {
			return fmt.Errorf("burn quota = %v, %v", s, err)
		}
		if s, err := sampleOf(m, "container_cpu_cfs_periods_total", burn); err != nil || s.Value <= 0 {
			return fmt.Errorf("burn cfs periods = %v, %v", s, err)
		}
		if s, err := sampleOf(m, "container_spec_memory_limit_bytes", burn); err != nil || s.Value != 32*mib {
			return fmt.Errorf("burn memory limit = %v, %v", s, err)
		}

		fill := map[string]string{"container": "fill", "pod": holder.Name, "namespace": ns}
		if s, err := sampleOf(m, "container_memory_working_set_bytes", fill); err != nil || s.Value < 48*mib {
			return fmt.Errorf("fill working set = %v, %v", s, err)
		}
		if s, err := sampleOf(m, "container_fs_usage_bytes", fill); err != nil || s.Metric["device"] == "" {
			return fmt.Errorf("fill fs usage = %v, %v", s, err)
		}

		// The pod's own cgroup: no container, no image, the pod's network.
		holderPod := map[string]string{"container": "", "image": "", "pod": holder.Name, "namespace": ns}
		if s, err := sampleOf(m, "container_memory_working_set_bytes", holderPod); err != nil || s.Value < 48*mib {
			return fmt.Errorf("holder pod working set = %v, %v", s, err)
		}
		if s, err := sampleOf(m, "container_network_receive_bytes_total", holderPod); err != nil || s.Metric["interface"] == "" {
			return fmt.Errorf("holder pod network = %v, %v", s, err)
		}
		if _, err := sampleOf(m, "container_network_transmit_packets_total", holderPod); err != nil {
			return fmt.Errorf("holder pod transmit packets: %v", err)
		}
		return nil
	})
}
