package volume

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"

	"github.com/nodeagent/nodeagent/pkg/volume/atomic"
)

// objectSource fetches the configMaps and secrets volumes reference. Every
// sync reads them afresh so that updates reach running pods.
type objectSource struct {
	client kubernetes.Interface
}

// configMapData returns the configMap's keys, nil when it is missing and
// optional.
func (s objectSource) configMapData(ctx context.Context, ns, name string, optional bool) (map[string][]byte, error) {
	if s.client == nil {
		return nil, fmt.Errorf("configMap %s/%s: no API client", ns, name)
	}
	cm, err := s.client.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		if apierrors.IsNotFound(err) {
			if optional {
				return nil, nil
			}
			// The kubelet's words: `configmap "x" not found`.
			return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "configmap"}, name)
		}
		return nil, fmt.Errorf("configMap %s/%s: %w", ns, name, err)
	}
	data := make(map[string][]byte, len(cm.Data)+len(cm.BinaryData))
	for k, v := range cm.Data {
		data[k] = []byte(v)
	}
	for k, v := range cm.BinaryData {
		data[k] = v
	}
	return data, nil
}

// secretData returns the secret's keys, nil when it is missing and optional.
func (s objectSource) secretData(ctx context.Context, ns, name string, optional bool) (map[string][]byte, error) {
	if s.client == nil {
		return nil, fmt.Errorf("secret %s/%s: no API client", ns, name)
	}
	sec, err := s.client.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		if apierrors.IsNotFound(err) {
			if optional {
				return nil, nil
			}
			return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "secret"}, name)
		}
		return nil, fmt.Errorf("secret %s/%s: %w", ns, name, err)
	}
	return sec.Data, nil
}

func newConfigMapPlugin(src objectSource, m mounter) *apiDataPlugin {
	return &apiDataPlugin{
		pluginName: configMapPluginName,
		supports:   func(vol *v1.Volume) bool { return vol.ConfigMap != nil },
		mounter:    m,
		payload: func(ctx context.Context, req *setUpRequest) (map[string]atomic.FileProjection, error) {
			cmv := req.vol.ConfigMap
			optional := cmv.Optional != nil && *cmv.Optional
			data, err := src.configMapData(ctx, req.pod.Namespace, cmv.Name, optional)
			if err != nil {
				return nil, err
			}
			return keyPayload("configMap "+cmv.Name, data, cmv.Items, cmv.DefaultMode, optional)
		},
	}
}

func newSecretPlugin(src objectSource, m mounter) *apiDataPlugin {
	return &apiDataPlugin{
		pluginName: secretPluginName,
		supports:   func(vol *v1.Volume) bool { return vol.Secret != nil },
		onTmpfs:    true,
		mounter:    m,
		payload: func(ctx context.Context, req *setUpRequest) (map[string]atomic.FileProjection, error) {
			sv := req.vol.Secret
			optional := sv.Optional != nil && *sv.Optional
			data, err := src.secretData(ctx, req.pod.Namespace, sv.SecretName, optional)
			if err != nil {
				return nil, err
			}
			return keyPayload("secret "+sv.SecretName, data, sv.Items, sv.DefaultMode, optional)
		},
	}
}
