package resizer

import (
	"context"
	"encoding/json"
	"fmt"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/client-go/kubernetes"
)

// The resizer's RBAC (external-resizer's) grants patch, not update, on PVs and on the
// claims' status, so every write is a strategic merge patch of what changed.

// patchClaim writes the difference from old to cur to the claim's status subresource (and
// its annotations). With checkVersion the write fails with a conflict unless the claim is
// still at old's resourceVersion: what the plan decided from is what is overwritten.
func patchClaim(ctx context.Context, client kubernetes.Interface, old, cur *v1.PersistentVolumeClaim, checkVersion bool) (*v1.PersistentVolumeClaim, error) {
	data, err := twoWayPatch(old, cur, &v1.PersistentVolumeClaim{})
	if err != nil {
		return nil, err
	}
	if checkVersion {
		if data, err = withResourceVersion(data, old.ResourceVersion); err != nil {
			return nil, err
		}
	}
	updated, err := client.CoreV1().PersistentVolumeClaims(old.Namespace).Patch(ctx, old.Name, types.StrategicMergePatchType, data, metav1.PatchOptions{}, "status")
	if err != nil {
		return nil, fmt.Errorf("patch status of claim %s/%s: %w", old.Namespace, old.Name, err)
	}
	return updated, nil
}

// patchVolume writes the difference from old to cur to the PV.
func patchVolume(ctx context.Context, client kubernetes.Interface, old, cur *v1.PersistentVolume) (*v1.PersistentVolume, error) {
	data, err := twoWayPatch(old, cur, &v1.PersistentVolume{})
	if err != nil {
		return nil, err
	}
	updated, err := client.CoreV1().PersistentVolumes().Patch(ctx, old.Name, types.StrategicMergePatchType, data, metav1.PatchOptions{})
	if err != nil {
		return nil, fmt.Errorf("patch PV %s: %w", old.Name, err)
	}
	return updated, nil
}

// twoWayPatch is the strategic merge patch from old to cur, both of the type of schema.
func twoWayPatch(old, cur, schema any) ([]byte, error) {
	oldData, err := json.Marshal(old)
	if err != nil {
		return nil, err
	}
	curData, err := json.Marshal(cur)
	if err != nil {
		return nil, err
	}
	data, err := strategicpatch.CreateTwoWayMergePatch(oldData, curData, schema)
	if err != nil {
		return nil, fmt.Errorf("make patch: %w", err)
	}
	return data, nil
}

// withResourceVersion adds metadata.resourceVersion to a patch, which the apiserver then
// takes as a precondition.
func withResourceVersion(patch []byte, rv string) ([]byte, error) {
	var m map[string]any
	if err := json.Unmarshal(patch, &m); err != nil {
		return nil, err
	}
	meta, _ := m["metadata"].(map[string]any)
	if meta == nil {
		meta = map[string]any{}
		m["metadata"] = meta
	}
	meta["resourceVersion"] = rv
	return json.Marshal(m)
}
