package objcache

import (
	v1 "k8s.io/api/core/v1"
)

// kind is the sort of object a pod references by name.
type kind uint8

const (
	configMapKind kind = iota
	secretKind
)

func (k kind) String() string {
	if k == secretKind {
		return "secret"
	}
	return "configmap"
}

// objectKey names one configMap or secret.
type objectKey struct {
	kind      kind
	namespace string
	name      string
}

// podReferences lists the configMaps and secrets a pod reads through the
// cache: those its configMap, secret and projected volumes project, those
// its containers' env and envFrom (init and ephemeral containers
// included) name, and its image pull secrets. Secrets only volume drivers
// read (a CSI volume's nodePublishSecretRef) are left out: the agent reads
// them once, when the volume is published, not at every refresh.
func podReferences(pod *v1.Pod) map[objectKey]struct{} {
	refs := map[objectKey]struct{}{}
	add := func(k kind, name string) {
		if name != "" {
			refs[objectKey{kind: k, namespace: pod.Namespace, name: name}] = struct{}{}
		}
	}
	for _, ref := range pod.Spec.ImagePullSecrets {
		add(secretKind, ref.Name)
	}
	for i := range pod.Spec.Volumes {
		vol := &pod.Spec.Volumes[i]
		switch {
		case vol.ConfigMap != nil:
			add(configMapKind, vol.ConfigMap.Name)
		case vol.Secret != nil:
			add(secretKind, vol.Secret.SecretName)
		case vol.Projected != nil:
			for _, src := range vol.Projected.Sources {
				if src.ConfigMap != nil {
					add(configMapKind, src.ConfigMap.Name)
				}
				if src.Secret != nil {
					add(secretKind, src.Secret.Name)
				}
			}
		}
	}
	envRefs := func(env []v1.EnvVar, envFrom []v1.EnvFromSource) {
		for _, from := range envFrom {
			if from.ConfigMapRef != nil {
				add(configMapKind, from.ConfigMapRef.Name)
			}
			if from.SecretRef != nil {
				add(secretKind, from.SecretRef.Name)
			}
		}
		for _, e := range env {
			if e.ValueFrom == nil {
				continue
			}
			if r := e.ValueFrom.ConfigMapKeyRef; r != nil {
				add(configMapKind, r.Name)
			}
			if r := e.ValueFrom.SecretKeyRef; r != nil {
				add(secretKind, r.Name)
			}
		}
	}
	for i := range pod.Spec.InitContainers {
		envRefs(pod.Spec.InitContainers[i].Env, pod.Spec.InitContainers[i].EnvFrom)
	}
	for i := range pod.Spec.Containers {
		envRefs(pod.Spec.Containers[i].Env, pod.Spec.Containers[i].EnvFrom)
	}
	for i := range pod.Spec.EphemeralContainers {
		envRefs(pod.Spec.EphemeralContainers[i].Env, pod.Spec.EphemeralContainers[i].EnvFrom)
	}
	return refs
}
