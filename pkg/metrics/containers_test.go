package metrics

import "testing"

func TestTerminatedContainers(t *testing.T) {
	m := New()
	m.ObserveContainerTerminated("container", 139, "Error")
	m.ObserveContainerTerminated("container", 139, "Error")
	m.ObserveContainerTerminated("init_container", 0, "Completed")
	fams, _ := scrape(t, m.Handler())
	for _, tc := range []struct {
		labels []string
		want   float64
	}{
		{[]string{"container_type", "container", "exit_code", "139", "reason", "Error"}, 2},
		{[]string{"container_type", "init_container", "exit_code", "0", "reason", "Completed"}, 1},
	} {
		if got := sample(t, fams, "kubelet_terminated_containers_total", tc.labels...).GetCounter().GetValue(); got != tc.want {
			t.Errorf("kubelet_terminated_containers_total%v = %v, want %v", tc.labels, got, tc.want)
		}
	}
}
