package volume

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/nodeagent/nodeagent/pkg/kube"
	"github.com/nodeagent/nodeagent/pkg/volume/atomic"
)

// Objects reads the configMaps and secrets that volumes project. A
// missing object is a NotFound error.
type Objects interface {
	GetConfigMap(ctx context.Context, namespace, name string) (*v1.ConfigMap, error)
	GetSecret(ctx context.Context, namespace, name string) (*v1.Secret, error)
}

// objectSource reads the configMaps and secrets volumes reference. Every
// refresh reads them again so that updates reach running pods; the
// Objects behind it decide what that costs the apiserver.
type objectSource struct {
	objects Objects // nil: no API client
	// client reads cluster trust bundles, at every refresh.
	client kube.Interface
}

// clientObjects reads each object from the apiserver, at every refresh.
type clientObjects struct{ client kube.Interface }

func (c clientObjects) GetConfigMap(ctx context.Context, namespace, name string) (*v1.ConfigMap, error) {
	return c.client.CoreV1().ConfigMaps(namespace).Get(ctx, name, metav1.GetOptions{})
}

func (c clientObjects) GetSecret(ctx context.Context, namespace, name string) (*v1.Secret, error) {
	return c.client.CoreV1().Secrets(namespace).Get(ctx, name, metav1.GetOptions{})
}

// newObjectSource reads through objects, else through client.
func newObjectSource(objects Objects, client kube.Interface) objectSource {
	src := objectSource{objects: objects, client: client}
	if objects == nil && client != nil {
		src.objects = clientObjects{client: client}
	}
	return src
}

// configMapData returns the configMap's keys, nil when it is missing and
// optional.
func (s objectSource) configMapData(ctx context.Context, ns, name string, optional bool) (map[string][]byte, error) {
	if s.objects == nil {
		return nil, fmt.Errorf("configMap %s/%s: no API client", ns, name)
	}
	cm, err := s.objects.GetConfigMap(ctx, ns, name)
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
	if s.objects == nil {
		return nil, fmt.Errorf("secret %s/%s: no API client", ns, name)
	}
	sec, err := s.objects.GetSecret(ctx, ns, name)
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
