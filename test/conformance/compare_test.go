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

func TestSIG(t *testing.T) {
	for spec, want := range map[string]string{
		"[sig-network] Services should serve a basic endpoint from pods [Conformance]":  "sig-network",
		"[sig-architecture] Conformance Tests should have at least two untainted nodes": "sig-architecture",
		"no sig at all": "other",
	} {
		if got := SIG(spec); got != want {
			t.Errorf("SIG(%q) = %q, want %q", spec, got, want)
		}
	}
}

func TestWriteComparisonBySIG(t *testing.T) {
	agent := &Summary{Specs: []Spec{
		{Name: "[sig-network] Services a [Conformance]", State: "passed"},
		{Name: "[sig-network] DNS b [Conformance]", State: "failed"},
		{Name: "[sig-apps] Deployment c [Conformance]", State: "passed"},
	}}
	kubelet := &Summary{Specs: []Spec{
		{Name: "[sig-network] Services a [Conformance]", State: "passed"},
		{Name: "[sig-network] DNS b [Conformance]", State: "passed"},
		{Name: "[sig-apps] Deployment c [Conformance]", State: "passed"},
	}}
	var b strings.Builder
	if err := WriteComparisonBy(&b, agent, kubelet, SIG); err != nil {
		t.Fatal(err)
	}
	for _, row := range []string{"| sig-apps | 1 / 1 | 1 / 1 |", "| sig-network | 1 / 2 | 2 / 2 |", "| **all** | **2 / 3** | **3 / 3** |"} {
		if !strings.Contains(b.String(), row) {
			t.Errorf("table lacks %q:\n%s", row, b.String())
		}
	}
}
