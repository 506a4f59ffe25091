package node

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/klog/v2"
)

// defaultLabels are the labels the agent owns on an existing Node: they are
// put back when missing or changed.
var defaultLabels = []string{v1.LabelHostname, v1.LabelOSStable, v1.LabelArchStable, labelBetaOS, labelBetaArch}

// register creates the Node. When a Node of that name exists (a restart, or
// one created by someone else) it is reconciled in place, never duplicated.
func (c *Controller) register(ctx context.Context, obs observation, now metav1.Time) error {
	logger := klog.FromContext(ctx)
	node := initialNode(&c.cfg, obs, now)
	// As the kubelet's, registration announces the pressure conditions of
	// the node it starts from, restarted or not.
	events := conditionEvents(nil, node.Status.Conditions)
	nodes := c.cfg.Client.CoreV1().Nodes()
	created, err := nodes.Create(ctx, node, metav1.CreateOptions{})
	if err == nil {
		logger.Info("Registered node")
		c.registered, c.lastReport = true, now.Time
		c.setNodeUID(created.UID)
		c.recordEvents(ctx, events)
		return nil
	}
	// A node that may not create Nodes may still own an existing one.
	if !apierrors.IsAlreadyExists(err) && !apierrors.IsForbidden(err) {
		return fmt.Errorf("register node: %w", err)
	}
	existing, getErr := nodes.Get(ctx, node.Name, metav1.GetOptions{})
	if getErr != nil {
		return fmt.Errorf("register node: create: %w; get existing: %w", err, getErr)
	}
	logger.Info("Node was previously registered, reconciling it")
	updated := existing.DeepCopy()
	reconcileMeta(node, updated, true)
	setStatus(&c.cfg, updated, obs, now)
	if err := c.patchStatus(ctx, existing, updated); err != nil {
		return fmt.Errorf("reconcile existing node: %w", err)
	}
	c.registered, c.lastReport = true, now.Time
	c.setNodeUID(existing.UID)
	c.recordEvents(ctx, append(events, conditionEvents(existing.Status.Conditions, updated.Status.Conditions)...))
	return nil
}

// reconcileMeta puts the agent's default labels and annotation from want
// onto have, and with userLabels the --node-labels too (at registration
// only, so an administrator may remove one later). Other labels are kept.
func reconcileMeta(want, have *v1.Node, userLabels bool) {
	if have.Labels == nil {
		have.Labels = map[string]string{}
	}
	for _, k := range defaultLabels {
		if v, ok := want.Labels[k]; ok {
			have.Labels[k] = v
		}
	}
	if userLabels {
		for k, v := range want.Labels {
			have.Labels[k] = v
		}
	}
	if v, ok := want.Annotations[annotationControllerManagedAttach]; ok {
		if have.Annotations == nil {
			have.Annotations = map[string]string{}
		}
		have.Annotations[annotationControllerManagedAttach] = v
	} else {
		delete(have.Annotations, annotationControllerManagedAttach)
	}
}

// updateStatus brings an existing Node's status up to date. It writes when
// something changed, and at least every StatusReportFrequency so readers
// see a fresh heartbeat, and records the events of the conditions that
// turned once the write went through. A Node deleted under the agent is
// registered again.
func (c *Controller) updateStatus(ctx context.Context, obs observation, now metav1.Time) error {
	logger := klog.FromContext(ctx)
	existing, err := c.getNode(ctx)
	if apierrors.IsNotFound(err) {
		logger.Info("Node object was deleted, registering it again")
		c.registered = false
		c.setNodeUID("")
		return c.register(ctx, obs, now)
	}
	if err != nil {
		c.apiFailed()
		return fmt.Errorf("get node: %w", err)
	}
	if existing.UID != c.nodeUID() {
		c.setNodeUID(existing.UID)
	}
	updated := existing.DeepCopy()
	reconcileMeta(initialNode(&c.cfg, obs, now), updated, false)
	setStatus(&c.cfg, updated, obs, now)

	due := !now.Time.Before(c.lastReport.Add(c.cfg.StatusReportFrequency))
	metaChanged := !maps.Equal(existing.Labels, updated.Labels) || !maps.Equal(existing.Annotations, updated.Annotations)
	if !due && !metaChanged && !statusChanged(&existing.Status, &updated.Status) {
		return nil
	}
	if err := c.patchStatus(ctx, existing, updated); err != nil {
		c.apiFailed()
		return err
	}
	c.lastReport = now.Time
	c.recordEvents(ctx, conditionEvents(existing.Status.Conditions, updated.Status.Conditions))
	return nil
}

// patchStatus sends the difference between old and updated as a strategic
// merge patch to nodes/status: conditions merge by type, so conditions set
// by others survive, and labels ride along in metadata.
func (c *Controller) patchStatus(ctx context.Context, old, updated *v1.Node) error {
	oldJSON, err := json.Marshal(old)
	if err != nil {
		return fmt.Errorf("marshal node: %w", err)
	}
	newJSON, err := json.Marshal(updated)
	if err != nil {
		return fmt.Errorf("marshal node: %w", err)
	}
	patch, err := strategicpatch.CreateTwoWayMergePatch(oldJSON, newJSON, v1.Node{})
	if err != nil {
		return fmt.Errorf("compute node status patch: %w", err)
	}
	if string(patch) == "{}" {
		return nil
	}
	// The UID precondition keeps a patch from landing on a Node that was
	// deleted and recreated in between.
	patch, err = addUIDPrecondition(patch, old.UID)
	if err != nil {
		return err
	}
	if _, err := c.cfg.Client.CoreV1().Nodes().Patch(ctx, old.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
		return fmt.Errorf("patch node status: %w", err)
	}
	return nil
}

func addUIDPrecondition(patch []byte, uid types.UID) ([]byte, error) {
	var m map[string]any
	if err := json.Unmarshal(patch, &m); err != nil {
		return nil, fmt.Errorf("decode node status patch: %w", err)
	}
	meta, _ := m["metadata"].(map[string]any)
	if meta == nil {
		meta = map[string]any{}
	}
	meta["uid"] = string(uid)
	m["metadata"] = meta
	return json.Marshal(m)
}
