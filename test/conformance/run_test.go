package conformance

import (
	"regexp"
	"testing"
)

// TestScopes: each scope picks its specs by name, and refuses a focus of the caller's.
func TestScopes(t *testing.T) {
	for _, tc := range []struct {
		scope, spec string
		runs        bool
	}{
		{ScopeNode, "[sig-node] Container Restart Rules should restart on exit code [NodeConformance]", true},
		{ScopeNode, "[sig-node] Pods should get a host IP [Conformance] [NodeConformance]", false},
		{ScopeNode, "[sig-node] Pod InPlace Resize Container [NodeConformance] should resize", false},
		{ScopeNode, "[sig-node] Sysctls [LinuxOnly] [NodeConformance] [Serial] should work", false},
		{ScopeNode, "[sig-node] X [Feature:UserNamespacesSupport] [NodeConformance] should run", false},
		{ScopeNode, "[sig-apps] Job should run a job to completion", false},
		{ScopeAll, "[sig-node] Pods should get a host IP [Conformance] [NodeConformance]", true},
		{ScopeAll, "[sig-node] Container Restart Rules should restart on exit code [NodeConformance]", false},
		{"", "[sig-storage] EmptyDir volumes should support (root,0644,tmpfs) [LinuxOnly] [Conformance] [NodeConformance]", true},
	} {
		o := Options{Scope: tc.scope}
		if err := o.complete(); err != nil {
			t.Fatalf("scope %q: %v", tc.scope, err)
		}
		runs := regexp.MustCompile(o.Focus).MatchString(tc.spec) && !regexp.MustCompile(o.Skip).MatchString(tc.spec)
		if runs != tc.runs {
			t.Errorf("scope %q runs %q: %v, want %v", tc.scope, tc.spec, runs, tc.runs)
		}
	}
	for _, scope := range []string{ScopeAll, ScopeNode} {
		o := Options{Scope: scope, Focus: "x"}
		if err := o.complete(); err == nil {
			t.Errorf("scope %q took a focus of its own", scope)
		}
	}
	if err := (&Options{Scope: "everything"}).complete(); err == nil {
		t.Error("an unknown scope was taken")
	}
}
