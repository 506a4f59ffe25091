package volume

import (
	"context"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/nodeagent/nodeagent/pkg/volume/atomic"
)

func newDownwardAPIPlugin(allocatable func() v1.ResourceList, m mounter) *apiDataPlugin {
	return &apiDataPlugin{
		pluginName: downwardAPIPluginName,
		supports:   func(vol *v1.Volume) bool { return vol.DownwardAPI != nil },
		onTmpfs:    true,
		mounter:    m,
		payload: func(_ context.Context, req *setUpRequest) (map[string]atomic.FileProjection, error) {
			d := req.vol.DownwardAPI
			return downwardAPIPayload(req.pod, d.Items, d.DefaultMode, allocatable())
		},
	}
}

// downwardAPIPayload renders each item from the pod; limits a container
// does not set fall back to the node's allocatable.
func downwardAPIPayload(pod *v1.Pod, items []v1.DownwardAPIVolumeFile, defaultMode *int32, allocatable v1.ResourceList) (map[string]atomic.FileProjection, error) {
	out := make(map[string]atomic.FileProjection, len(items))
	for _, it := range items {
		var value string
		var err error
		switch {
		case it.FieldRef != nil:
			value, err = podFieldValue(pod, it.FieldRef.FieldPath)
		case it.ResourceFieldRef != nil:
			value, err = containerResourceValue(pod, it.ResourceFieldRef, allocatable)
		default:
			err = fmt.Errorf("neither fieldRef nor resourceFieldRef is set")
		}
		if err != nil {
			return nil, fmt.Errorf("downwardAPI %s: %w", it.Path, err)
		}
		out[it.Path] = atomic.FileProjection{Data: []byte(value), Mode: fileMode(it.Mode, defaultMode)}
	}
	return out, nil
}

// podFieldValue supports the field paths a volume may reference.
func podFieldValue(pod *v1.Pod, path string) (string, error) {
	if key, ok := subscript(path, "metadata.labels"); ok {
		return pod.Labels[key], nil
	}
	if key, ok := subscript(path, "metadata.annotations"); ok {
		return pod.Annotations[key], nil
	}
	switch path {
	case "metadata.name":
		return pod.Name, nil
	case "metadata.namespace":
		return pod.Namespace, nil
	case "metadata.uid":
		return string(pod.UID), nil
	case "metadata.labels":
		return formatMap(pod.Labels), nil
	case "metadata.annotations":
		return formatMap(pod.Annotations), nil
	}
	return "", fmt.Errorf("unsupported fieldPath %q", path)
}

// subscript parses `prefix['key']`.
func subscript(path, prefix string) (string, bool) {
	rest, ok := strings.CutPrefix(path, prefix+"['")
	if !ok {
		return "", false
	}
	return strings.CutSuffix(rest, "']")
}

// formatMap renders key="value" lines in key order, values quoted as Go
// strings, without a final newline: the kubelet's format, which images
// already parse.
func formatMap(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	lines := make([]string, 0, len(keys))
	for _, k := range keys {
		lines = append(lines, k+"="+strconv.Quote(m[k]))
	}
	return strings.Join(lines, "\n")
}

// containerResourceValue renders limits.* or requests.* of one container,
// divided by the divisor and rounded up.
func containerResourceValue(pod *v1.Pod, ref *v1.ResourceFieldSelector, allocatable v1.ResourceList) (string, error) {
	c := findContainer(pod, ref.ContainerName)
	if c == nil {
		return "", fmt.Errorf("container %q not found in pod", ref.ContainerName)
	}
	kind, name, ok := strings.Cut(ref.Resource, ".")
	if !ok || (kind != "limits" && kind != "requests") {
		return "", fmt.Errorf("unsupported container resource %q", ref.Resource)
	}
	res := v1.ResourceName(name)
	var q resource.Quantity
	if kind == "limits" {
		v, set := c.Resources.Limits[res]
		if !set {
			v = allocatable[res]
		}
		q = v
	} else {
		q = c.Resources.Requests[res]
	}
	divisor := ref.Divisor
	if divisor.IsZero() {
		divisor = resource.MustParse("1")
	}
	var n float64
	if res == v1.ResourceCPU {
		n = math.Ceil(float64(q.MilliValue()) / float64(divisor.MilliValue()))
	} else {
		n = math.Ceil(float64(q.Value()) / float64(divisor.Value()))
	}
	return strconv.FormatInt(int64(n), 10), nil
}

func findContainer(pod *v1.Pod, name string) *v1.Container {
	for _, list := range [][]v1.Container{pod.Spec.Containers, pod.Spec.InitContainers} {
		for i := range list {
			if list[i].Name == name {
				return &list[i]
			}
		}
	}
	return nil
}
