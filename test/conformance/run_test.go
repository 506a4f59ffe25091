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
		{ScopeCSIMock, "[sig-storage] CSI Mock volume attach CSI attach test using mock driver should require VolumeAttach for drivers with attachment", true},
		{ScopeCSIMock, "[sig-storage] CSI Mock volume node stage CSI NodeStage error cases should call NodeUnstage after NodeStage success [Slow]", true},
		{ScopeCSIMock, "[sig-storage] CSI Mock PVC Unused Condition [FeatureGate:PersistentVolumeClaimUnusedSinceTime] should set Unused=True condition when PVC has no referencing pods [Beta]", true},
		{ScopeCSIMock, "[sig-storage] CSI Mock volume storage capacity scoring storage capacity scoring [Feature:StorageCapacityScoring] should fail to place pod if no node meets the requested size [FeatureGate:StorageCapacityScoring] [Beta]", true},
		{ScopeCSIMock, "[sig-storage] CSI Mock when kubelet restart [Provider:gce,aws,local,azure] should not umount volume when the pvc is terminating but still used by a running pod [Disruptive] [Serial]", false},
		{ScopeCSIMock, "[sig-storage] CSI Mock selinux on mount SELinuxMount [LinuxOnly] [Feature:SELinux] should pass SELinux mount option for RWOP volume and Pod with SELinux context set [FeatureGate:SELinuxMountReadWriteOncePod]", false},
		{ScopeCSIMock, "[sig-storage] CSI Mock Node Volume Health [FeatureGate:CSIVolumeHealth] CSI Mock Node Volume Health return normal volume health [Alpha] [Feature:OffByDefault] [Slow]", false},
		{ScopeCSIMock, "[sig-storage] CSI Mock volume snapshot CSI Volume Snapshots secrets [Feature:VolumeSnapshotDataSource] volume snapshot create/delete with secrets", true},
		{ScopeCSIMock, "[sig-storage] CSI Mock volume expansion CSI Volume expansion should expand volume without restarting pod if nodeExpansion=off", true},
		{ScopeCSIMock, "[sig-storage] CSIInlineVolumes should support CSIVolumeSource in Pod API [Conformance]", false},
		{ScopeCSIMock, "[sig-storage] CSI Volumes [Driver: csi-hostpath] [Testpattern: Dynamic PV (default fs)] provisioning should provision storage with defaults", false},
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
	for _, scope := range []string{ScopeAll, ScopeNode, ScopeCSIMock} {
		o := Options{Scope: scope, Focus: "x"}
		if err := o.complete(); err == nil {
			t.Errorf("scope %q took a focus of its own", scope)
		}
	}
	narrow := Options{Scope: ScopeCSIMock, Focus: csiMockFocus + " volume snapshot"}
	if err := narrow.complete(); err != nil || narrow.Skip != csiMockSkip || !narrow.VolumeSnapshots {
		t.Errorf("the csimock scope narrowed to a group: %v, %+v", err, narrow)
	}
	if err := (&Options{Scope: "everything"}).complete(); err == nil {
		t.Error("an unknown scope was taken")
	}
}

// TestCSIMockGroups: the specs the csimock scope runs fall into the CSI Mock groups of its
// table, one per Describe, not into the fallback "sig-storage CSI".
func TestCSIMockGroups(t *testing.T) {
	for _, tc := range []struct{ spec, group string }{
		{"[sig-storage] CSI Mock volume attach CSI attach test using mock driver should require VolumeAttach for drivers with attachment", "sig-storage CSI Mock attach"},
		{"[sig-storage] CSI Mock volume storage capacity storage capacity unlimited", "sig-storage CSI Mock storage capacity"},
		{"[sig-storage] CSI Mock volume storage capacity scoring storage capacity scoring [Feature:StorageCapacityScoring] should fail to place pod if no node meets the requested size [FeatureGate:StorageCapacityScoring] [Beta]", "sig-storage CSI Mock storage capacity scoring"},
		{"[sig-storage] CSI Mock VolumeLimitScaling scheduling [FeatureGate:VolumeLimitScaling] VolumeLimitScaling scheduling allows scheduling when driver not installed and CSIDriver object is not present [Beta]", "sig-storage CSI Mock volume limit scaling"},
		{"[sig-storage] CSI Mock volume limit CSI volume limit information using mock driver should report attach limit when limit is bigger than 0 [Slow]", "sig-storage CSI Mock volume limit"},
		{"[sig-storage] CSI Mock PVC Unused Condition [FeatureGate:PersistentVolumeClaimUnusedSinceTime] should track Unused correctly with multiple pods [Beta]", "sig-storage CSI Mock PVC unused"},
		{"[sig-storage] CSI Mock fsgroup as mount option Delegate FSGroup to CSI driver [LinuxOnly] should pass FSGroup to CSI driver if it is set in pod and driver supports VOLUME_MOUNT_GROUP", "sig-storage CSI Mock fsGroup mount option"},
		{"[sig-storage] CSI Mock volume node stage CSI NodeUnstage error cases should call NodeStage after NodeUnstage success [Slow]", "sig-storage CSI Mock NodeStage errors"},
	} {
		if got := Group(tc.spec); got != tc.group {
			t.Errorf("Group(%q) = %q, want %q", tc.spec, got, tc.group)
		}
	}
}
