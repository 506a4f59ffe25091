package conformance

import (
	"reflect"
	"regexp"
	"strings"
	"testing"
)

// report is shaped like the junit_01.xml e2e.test writes: suite nodes, specs the focus left
// out ("skipped"), a spec that skipped itself ("skipped - reason"), passes and failures
// without a message attribute (the e2e framework omits it).
const report = `<?xml version="1.0" encoding="UTF-8"?>
  <testsuites tests="7" disabled="3" errors="0" failures="2" time="100">
      <testsuite name="Kubernetes e2e suite" package="/" tests="7" disabled="0" skipped="3" errors="0" failures="2" time="100">
          <testcase name="[SynchronizedBeforeSuite]" classname="Kubernetes e2e suite" status="passed" time="1.5"></testcase>
          <testcase name="[It] [sig-apps] Deployment should run [Conformance]" classname="Kubernetes e2e suite" status="skipped" time="0">
              <skipped message="skipped"></skipped>
          </testcase>
          <testcase name="[It] [sig-node] Pods should get a host IP [NodeConformance] [Conformance]" classname="Kubernetes e2e suite" status="passed" time="6.2"></testcase>
          <testcase name="[It] [sig-node] Container Lifecycle Hook when create a pod with lifecycle hook should execute poststart exec hook properly [NodeConformance] [Conformance]" classname="Kubernetes e2e suite" status="failed" time="120">
              <failure message="" type="failed">[FAILED] Timed out after 120.001s.&#xA;Expected success, but got an error:&#xA;    pod not ready&#xA;In [It] at: k8s.io/kubernetes/test/e2e/common/node/lifecycle_hook.go:129 @ 11/23/26 17:00:00.000&#xA;</failure>
              <system-err>timeline</system-err>
          </testcase>
          <testcase name="[It] [sig-storage] EmptyDir volumes should support (root,0644,tmpfs) [LinuxOnly] [NodeConformance] [Conformance]" classname="Kubernetes e2e suite" status="timedout" time="300">
              <failure message="" type="timedout">&#xA;[TIMEDOUT] A suite timeout occurred&#xA;In [It] at: x.go:1&#xA;</failure>
          </testcase>
          <testcase name="[It] [sig-node] Sysctls [LinuxOnly] should support sysctls [Conformance]" classname="Kubernetes e2e suite" status="skipped" time="0.1">
              <skipped message="skipped - Only supported for providers [gce] (not skeleton)"></skipped>
          </testcase>
          <testcase name="[ReportAfterSuite] Kubernetes e2e JUnit report" classname="Kubernetes e2e suite" status="passed" time="0"></testcase>
      </testsuite>
  </testsuites>`

func TestParseJUnit(t *testing.T) {
	s, err := ParseJUnit(strings.NewReader(report))
	if err != nil {
		t.Fatal(err)
	}
	if s.Passed != 1 || s.Failed != 2 || s.Skipped != 1 {
		t.Errorf("counts = %d passed, %d failed, %d skipped; want 1, 2, 1", s.Passed, s.Failed, s.Skipped)
	}
	if got, want := s.Line(), "1 passed, 2 failed"; got != want {
		t.Errorf("Line() = %q, want %q", got, want)
	}
	reasons := map[string]string{}
	for _, sp := range s.Specs {
		reasons[sp.Name] = sp.State + ": " + sp.Reason
	}
	want := map[string]string{
		"[sig-node] Pods should get a host IP [NodeConformance] [Conformance]":                                                                                  "passed: ",
		"[sig-node] Container Lifecycle Hook when create a pod with lifecycle hook should execute poststart exec hook properly [NodeConformance] [Conformance]": "failed: Timed out after 120.001s.",
		"[sig-storage] EmptyDir volumes should support (root,0644,tmpfs) [LinuxOnly] [NodeConformance] [Conformance]":                                           "timedout: A suite timeout occurred",
		"[sig-node] Sysctls [LinuxOnly] should support sysctls [Conformance]":                                                                                   "skipped: Only supported for providers [gce] (not skeleton)",
	}
	if !reflect.DeepEqual(reasons, want) {
		t.Errorf("specs:\n got %q\nwant %q", reasons, want)
	}
	var text strings.Builder
	if err := s.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{
		"1 passed, 2 failed, 1 skipped",
		"sig-node lifecycle hooks",
		"    failed: Timed out after 120.001s.",
		"skipped at run time:",
	} {
		if !strings.Contains(text.String(), line) {
			t.Errorf("summary text lacks %q:\n%s", line, text.String())
		}
	}
}

func TestParseJUnitSuiteFailure(t *testing.T) {
	doc := `<testsuites><testsuite>
<testcase name="[SynchronizedBeforeSuite]" status="failed"><failure type="failed">[FAILED] no node is ready</failure></testcase>
<testcase name="[It] [sig-node] Pods should get a host IP [Conformance]" status="skipped"><skipped message="skipped - Spec skipped because an earlier spec in an ordered container failed"/></testcase>
</testsuite></testsuites>`
	s, err := ParseJUnit(strings.NewReader(doc))
	if err != nil {
		t.Fatal(err)
	}
	if s.Failed != 1 || s.Specs[0].Name != "[SynchronizedBeforeSuite]" || s.Specs[0].Reason != "no node is ready" {
		t.Errorf("a failed suite node must count as a failure with its reason: %+v", s)
	}
}

func TestParseJUnitBroken(t *testing.T) {
	if _, err := ParseJUnit(strings.NewReader("<testsuites><testsuite>")); err == nil {
		t.Error("a truncated report parsed without error")
	}
}

func TestGroup(t *testing.T) {
	tests := []struct{ spec, want string }{
		{"[sig-node] Pods Extended Pods Set QOS Class should be set [Conformance]", "sig-node pods"},
		{"[sig-node] Pods should get a host IP [Conformance]", "sig-node pods"},
		{"[sig-node] PodTemplates should run the lifecycle of PodTemplates [Conformance]", "sig-node API objects"},
		{"[sig-node] Probing container should be restarted [Conformance]", "sig-node probes"},
		{"[sig-node] Containers should use the image defaults [Conformance]", "sig-node containers"},
		{"[sig-node] Container Runtime blackbox test on terminated container [Conformance]", "sig-node runtime"},
		{"[sig-storage] EmptyDir wrapper volumes should not conflict [Conformance]", "sig-storage emptyDir"},
		{"[sig-storage] Subpath Atomic writer volumes should support subpaths [Conformance]", "sig-storage subPath"},
		{"[sig-storage] CSI Mock volume limit CSI volume limit information using mock driver should report attach limit when limit is bigger than 0 [Slow]", "sig-storage CSI Mock volume limit"},
		{"[sig-storage] CSI Mock VolumeLimitScaling scheduling [FeatureGate:VolumeLimitScaling] VolumeLimitScaling scheduling blocks scheduling", "sig-storage CSI Mock volume limit scaling"},
		{"[sig-storage] CSI Mock volume storage capacity storage capacity unlimited", "sig-storage CSI Mock storage capacity"},
		{"[sig-apps] Deployment should run [Conformance]", "sig-apps Deployment"},
		{"[SynchronizedBeforeSuite]", "other"},
	}
	for _, tt := range tests {
		if got := Group(tt.spec); got != tt.want {
			t.Errorf("Group(%q) = %q, want %q", tt.spec, got, tt.want)
		}
	}
}

func TestFocus(t *testing.T) {
	focus := regexp.MustCompile(DefaultFocus)
	skip := regexp.MustCompile(DefaultSkip)
	selected := func(s string) bool { return focus.MatchString(s) && !skip.MatchString(s) }
	tests := []struct {
		spec string
		want bool
	}{
		{"[sig-node] Pods should get a host IP [NodeConformance] [Conformance]", true},
		{"[sig-storage] Projected secret should be consumable in multiple volumes in a pod [NodeConformance] [Conformance]", true},
		{"[sig-storage] Subpath Atomic writer volumes should support subpaths with configmap pod [Conformance]", true},
		{"[sig-storage] EmptyDir wrapper volumes should not cause race condition when used for configmaps [Serial] [Conformance]", false},
		{"[sig-storage] CSIInlineVolumes should support CSIVolumeSource in Pod API [Conformance]", true},
		{"[sig-storage] CSINodes CSI CSINode API [Serial] should run through the lifecycle of a csinode [Conformance]", false},
		{"[sig-storage] VolumeAttachment Conformance should run through the lifecycle of a VolumeAttachment [Conformance]", true},
		{"[sig-storage] CSI Volumes [Driver: csi-hostpath] should provision [Conformance]", false},
		{"[sig-node] NoExecuteTaintManager Single Pod [Serial] removing taint cancels eviction [Disruptive] [Conformance]", false},
		{"[sig-node] Pods should be updated [NodeConformance]", false},
		{"[sig-network] DNS should provide DNS for the cluster [Conformance]", false},
	}
	for _, tt := range tests {
		if got := selected(tt.spec); got != tt.want {
			t.Errorf("selected(%q) = %v, want %v", tt.spec, got, tt.want)
		}
	}
	// A smoke spec is one the default focus or the CSI Mock scope runs.
	csiMock := func(s string) bool {
		return regexp.MustCompile(csiMockFocus).MatchString(s) && !regexp.MustCompile(csiMockSkip).MatchString(s)
	}
	smoke := regexp.MustCompile(SmokeFocus())
	for _, s := range SmokeSpecs {
		if !smoke.MatchString(s) || !selected(s) && !csiMock(s) {
			t.Errorf("smoke spec %q is not selected by both the smoke focus and the default focus or the CSI Mock scope's", s)
		}
	}
	if smoke.MatchString("[sig-storage] ConfigMap should be consumable from pods in volume with mappings [NodeConformance] [Conformance]") {
		t.Error("the smoke focus selects a spec whose name only starts like a smoke spec")
	}
}
