package admission

import (
	"fmt"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
)

// BenchmarkAdmitBeside250 is a pod judged against 250 admitted pods, as each new pod is on
// a node filling to 250: their requests are summed each time, from the Admitter's cache
// of them when the pods are the same objects as at the last judgment.
func BenchmarkAdmitBeside250(b *testing.B) {
	a, err := New(Config{KernelVersion: "6.18.44-fc"})
	if err != nil {
		b.Fatal(err)
	}
	node := baseNode()
	node.Status.Allocatable = rl("cpu", "64", "memory", "256Gi", "pods", "300", "ephemeral-storage", "10Gi")
	admitted := make([]*v1.Pod, 250)
	for i := range admitted {
		admitted[i] = podReq(fmt.Sprintf("p%d", i), rl("cpu", "1m", "memory", "4Mi"))
	}
	pod := podReq("new", rl("cpu", "1m", "memory", "4Mi"))
	logger := klog.Background()
	for b.Loop() {
		if r := a.Admit(logger, pod, node, admitted); !r.Admit {
			b.Fatalf("refused: %+v", r)
		}
	}
}
