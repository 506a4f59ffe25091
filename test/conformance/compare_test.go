package conformance

import (
	"strings"
	"testing"
)

func TestWriteComparison(t *testing.T) {
	agent := &Summary{Specs: []Spec{
		{Name: "[sig-node] Pods should get a host IP [Conformance]", State: "passed"},
		{Name: "[sig-node] Pods should be updated [Conformance]", State: "failed", Reason: "timed out"},
		{Name: "[sig-storage] EmptyDir volumes should support (root,0644,tmpfs) [Conformance]", State: "passed"},
	}}
	kubelet := &Summary{Specs: []Spec{
		{Name: "[sig-node] Pods should get a host IP [Conformance]", State: "passed"},
		{Name: "[sig-node] Pods should be updated [Conformance]", State: "passed"},
		{Name: "[sig-storage] EmptyDir volumes should support (root,0644,tmpfs) [Conformance]", State: "failed"},
	}}
	var b strings.Builder
	if err := WriteComparison(&b, agent, kubelet); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"| sig-node pods | 1 / 2 | 2 / 2 |",
		"| sig-storage emptyDir | 1 / 1 | 0 / 1 |",
		"| **all** | **2 / 3** | **2 / 3** |",
		"| [sig-node] Pods should be updated [Conformance] | failed | passed |",
		"| [sig-storage] EmptyDir volumes should support (root,0644,tmpfs) [Conformance] | passed | failed |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
	if strings.Contains(out, "should get a host IP") {
		t.Errorf("a spec that passed on both is listed:\n%s", out)
	}
}
