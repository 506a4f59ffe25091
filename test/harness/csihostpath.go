package harness

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// The hostpath CSI driver as make up deploys it, from deploy/csi-hostpath: its name, its
// default StorageClass, and where its pod runs.
const (
	CSIHostpathDriver       = "hostpath.csi.k8s.io"
	CSIHostpathStorageClass = "nodeagent-csi"
	CSIHostpathNamespace    = "csi-hostpath"
	csiHostpathPod          = "csi-hostpathplugin-0"
	csiHostpathManifests    = "deploy/csi-hostpath"
)

// Paths in the manifests as on a stock node, which the harness moves under its run dir.
const (
	stockRootDir     = "/var/lib/kubelet/"
	stockHostpathDir = "/var/lib/csi-hostpath-data"
)

// CSIHostpathDataDir holds the deployed driver's volumes and state; teardown removes it
// with the run dir.
func (c *Config) CSIHostpathDataDir() string { return c.path("csi-hostpath-data") }

// deployCSIHostpath applies the manifests of deploy/csi-hostpath, in file name order, with
// server-side apply, and waits until the driver has registered with the node and its
// controller sidecars run.
func (c *Config) deployCSIHostpath(ctx context.Context) error {
	objs, err := c.csiHostpathObjects()
	if err != nil {
		return err
	}
	if err := c.applyObjects(ctx, objs); err != nil {
		return err
	}
	return c.WaitCSIHostpath(ctx, time.Time{})
}

// csiHostpathObjects reads the manifests with the stock paths moved under the run dir.
func (c *Config) csiHostpathObjects() ([]*unstructured.Unstructured, error) {
	return c.manifestObjects(csiHostpathManifests, func(data []byte) []byte {
		return rewriteStockPaths(data, c.AgentRootDir(), c.CSIHostpathDataDir())
	})
}

// manifestObjects reads the manifests of the repository's dir (readManifests).
func (c *Config) manifestObjects(dir string, rewrite func([]byte) []byte) ([]*unstructured.Unstructured, error) {
	return readManifests(filepath.Join(c.RepoDir, dir), rewrite)
}

// readManifests reads the objects of the YAML files of dir, in file name order, each file
// through rewrite when it is given; a kustomization file is not an object to apply.
func readManifests(dir string, rewrite func([]byte) []byte) ([]*unstructured.Unstructured, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return nil, err
	}
	sort.Strings(files)
	var out []*unstructured.Unstructured
	for _, f := range files {
		if strings.HasPrefix(filepath.Base(f), "kustomization") {
			continue
		}
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		if rewrite != nil {
			data = rewrite(data)
		}
		objs, err := decodeManifest(data)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		out = append(out, objs...)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no manifests in %s", dir)
	}
	return out, nil
}

// rewriteStockPaths moves the paths of a stock node to the harness's: the kubelet's root
// dir to the agent's --root-dir, the driver's data dir to dataDir. Upstream's storage e2e
// does the same with its --kubelet-root-dir.
func rewriteStockPaths(manifest []byte, rootDir, dataDir string) []byte {
	s := strings.ReplaceAll(string(manifest), stockRootDir, strings.TrimSuffix(rootDir, "/")+"/")
	return []byte(strings.ReplaceAll(s, stockHostpathDir, dataDir))
}

// decodeManifest splits a multi-document YAML file into its objects.
func decodeManifest(data []byte) ([]*unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var out []*unstructured.Unstructured
	for {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, err
		}
		if len(m) == 0 {
			continue // an empty document
		}
		u := &unstructured.Unstructured{Object: m}
		if u.GetKind() == "" || u.GetName() == "" {
			return nil, fmt.Errorf("a document without kind or name: %v", m)
		}
		out = append(out, u)
	}
}

// WaitCSIHostpath waits until the node lists the driver in its CSINode (the registrar and
// the agent's plugin watcher did their part) and every container of the driver's pod is
// ready (the sidecars connected to the driver and the apiserver), each started at or after
// since. A caller that replaced the node agent (SwitchAgent removes every sandbox) passes
// the time of the switch, so that the status the old agent left does not count: the CSINode
// still lists the driver then, and the pod still shows the old containers ready.
func (c *Config) WaitCSIHostpath(ctx context.Context, since time.Time) error {
	cs, err := c.Client()
	if err != nil {
		return err
	}
	return c.waitReady(ctx, "agent", 3*time.Minute, func(ctx context.Context) error {
		pod, err := cs.CoreV1().Pods(CSIHostpathNamespace).Get(ctx, csiHostpathPod, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, st := range pod.Status.ContainerStatuses {
			if !st.Ready {
				return fmt.Errorf("pod %s/%s: container %s not ready (%s)", pod.Namespace, pod.Name, st.Name, containerState(st))
			}
			// Status times have whole seconds.
			if r := st.State.Running; r == nil || r.StartedAt.Time.Before(since.Truncate(time.Second)) {
				return fmt.Errorf("pod %s/%s: container %s not restarted since %s", pod.Namespace, pod.Name, st.Name, since.Format(time.RFC3339))
			}
		}
		if len(pod.Status.ContainerStatuses) != len(pod.Spec.Containers) {
			return fmt.Errorf("pod %s/%s: %s", pod.Namespace, pod.Name, pod.Status.Phase)
		}
		node, err := cs.StorageV1().CSINodes().Get(ctx, NodeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, d := range node.Spec.Drivers {
			if d.Name == CSIHostpathDriver {
				return nil
			}
		}
		return fmt.Errorf("CSINode %s does not list %s yet", NodeName, CSIHostpathDriver)
	})
}

func containerState(st corev1.ContainerStatus) string {
	switch {
	case st.State.Waiting != nil:
		return "waiting: " + st.State.Waiting.Reason + " " + st.State.Waiting.Message
	case st.State.Terminated != nil:
		return fmt.Sprintf("terminated: %s, exit %d", st.State.Terminated.Reason, st.State.Terminated.ExitCode)
	default:
		return "running"
	}
}
