package volume

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"

	"github.com/nodeagent/nodeagent/pkg/downward"
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
	in := downward.Inputs{Allocatable: allocatable}
	out := make(map[string]atomic.FileProjection, len(items))
	for _, it := range items {
		var value string
		var err error
		switch {
		case it.FieldRef != nil:
			value, err = downward.FieldValue(pod, it.FieldRef, downward.Volume, in)
		case it.ResourceFieldRef != nil:
			value, err = downward.ResourceValue(pod, nil, it.ResourceFieldRef, downward.Volume, in)
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
