package harness

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/clientcmd"
)

// podNetworkRBAC grants node identities the read of all Nodes that nodeagent's own pod
// network (--pod-network=bridge) needs for its routes.
const podNetworkRBAC = "deploy/pod-network/rbac.yaml"

// CNIConfDir is containerd's CNI configuration directory: an agent started with
// --pod-network=bridge is given it as --cni-conf-dir.
func (c *Config) CNIConfDir() string {
	_, _, _, _, cniConf, _ := c.containerdPaths()
	return cniConf
}

// RestoreCNIConfig writes the harness's own CNI configuration again, over or after what an
// agent with --pod-network=bridge wrote or removed, so that later tests get the harness's
// network.
func (c *Config) RestoreCNIConfig() error {
	conflist, err := c.cniConflist(nodeAt(0))
	if err != nil {
		return err
	}
	return writeFiles(c.CNIConfDir(), map[string]string{"10-nodeagent.conflist": string(conflist)})
}

// ApplyPodNetworkRBAC applies deploy/pod-network/rbac.yaml (cluster-scoped RBAC objects)
// with server-side apply.
func (c *Config) ApplyPodNetworkRBAC(ctx context.Context) error {
	data, err := os.ReadFile(filepath.Join(c.RepoDir, podNetworkRBAC))
	if err != nil {
		return err
	}
	objs, err := decodeManifest(data)
	if err != nil {
		return fmt.Errorf("%s: %w", podNetworkRBAC, err)
	}
	rc, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig())
	if err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		return err
	}
	for _, obj := range objs {
		gvk := obj.GroupVersionKind()
		if gvk.Group != "rbac.authorization.k8s.io" || obj.GetNamespace() != "" {
			return fmt.Errorf("%s: %s %s is not a cluster-scoped RBAC object", podNetworkRBAC, gvk.Kind, obj.GetName())
		}
		gvr := schema.GroupVersionResource{Group: gvk.Group, Version: gvk.Version, Resource: strings.ToLower(gvk.Kind) + "s"}
		if _, err := dyn.Resource(gvr).Apply(ctx, obj.GetName(), obj, metav1.ApplyOptions{FieldManager: "nodeagent-harness", Force: true}); err != nil {
			return fmt.Errorf("apply %s %s: %w", gvk.Kind, obj.GetName(), err)
		}
	}
	return nil
}
