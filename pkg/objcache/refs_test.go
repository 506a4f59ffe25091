package objcache

import (
	"maps"
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func basePod() *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "uid-1"},
		Spec: v1.PodSpec{
			Containers: []v1.Container{{Name: "c", Image: "busybox"}},
		},
	}
}

func TestPodReferences(t *testing.T) {
	cmKey := func(name string) objectKey { return objectKey{kind: configMapKind, namespace: "ns", name: name} }
	secKey := func(name string) objectKey { return objectKey{kind: secretKind, namespace: "ns", name: name} }
	tests := []struct {
		name   string
		mutate func(*v1.Pod)
		want   []objectKey
	}{
		{name: "nothing referenced", mutate: func(*v1.Pod) {}},
		{
			name: "volumes",
			mutate: func(p *v1.Pod) {
				p.Spec.Volumes = []v1.Volume{
					{Name: "a", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{LocalObjectReference: v1.LocalObjectReference{Name: "cm"}}}},
					{Name: "b", VolumeSource: v1.VolumeSource{Secret: &v1.SecretVolumeSource{SecretName: "sec"}}},
					{Name: "c", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}},
				}
			},
			want: []objectKey{cmKey("cm"), secKey("sec")},
		},
		{
			name: "projected sources",
			mutate: func(p *v1.Pod) {
				p.Spec.Volumes = []v1.Volume{{Name: "kube-api-access", VolumeSource: v1.VolumeSource{Projected: &v1.ProjectedVolumeSource{Sources: []v1.VolumeProjection{
					{ServiceAccountToken: &v1.ServiceAccountTokenProjection{Path: "token"}},
					{ConfigMap: &v1.ConfigMapProjection{LocalObjectReference: v1.LocalObjectReference{Name: "kube-root-ca.crt"}}},
					{Secret: &v1.SecretProjection{LocalObjectReference: v1.LocalObjectReference{Name: "psec"}}},
				}}}}}
			},
			want: []objectKey{cmKey("kube-root-ca.crt"), secKey("psec")},
		},
		{
			name: "env and envFrom of every kind of container",
			mutate: func(p *v1.Pod) {
				p.Spec.InitContainers = []v1.Container{{Name: "init", EnvFrom: []v1.EnvFromSource{
					{ConfigMapRef: &v1.ConfigMapEnvSource{LocalObjectReference: v1.LocalObjectReference{Name: "init-cm"}}},
					{SecretRef: &v1.SecretEnvSource{LocalObjectReference: v1.LocalObjectReference{Name: "init-sec"}}},
				}}}
				p.Spec.Containers[0].Env = []v1.EnvVar{
					{Name: "PLAIN", Value: "x"},
					{Name: "FIELD", ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
					{Name: "CM", ValueFrom: &v1.EnvVarSource{ConfigMapKeyRef: &v1.ConfigMapKeySelector{LocalObjectReference: v1.LocalObjectReference{Name: "env-cm"}, Key: "k"}}},
					{Name: "SEC", ValueFrom: &v1.EnvVarSource{SecretKeyRef: &v1.SecretKeySelector{LocalObjectReference: v1.LocalObjectReference{Name: "env-sec"}, Key: "k"}}},
				}
				p.Spec.EphemeralContainers = []v1.EphemeralContainer{{EphemeralContainerCommon: v1.EphemeralContainerCommon{Name: "debug", Env: []v1.EnvVar{
					{Name: "EPH", ValueFrom: &v1.EnvVarSource{ConfigMapKeyRef: &v1.ConfigMapKeySelector{LocalObjectReference: v1.LocalObjectReference{Name: "eph-cm"}, Key: "k"}}},
				}}}}
			},
			want: []objectKey{cmKey("init-cm"), secKey("init-sec"), cmKey("env-cm"), secKey("env-sec"), cmKey("eph-cm")},
		},
		{
			name: "image pull secrets",
			mutate: func(p *v1.Pod) {
				p.Spec.ImagePullSecrets = []v1.LocalObjectReference{{Name: "regcred"}, {Name: ""}}
			},
			want: []objectKey{secKey("regcred")},
		},
		{
			name: "one name as configMap and secret is two objects, twice is one",
			mutate: func(p *v1.Pod) {
				p.Spec.Volumes = []v1.Volume{
					{Name: "a", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{LocalObjectReference: v1.LocalObjectReference{Name: "same"}}}},
					{Name: "b", VolumeSource: v1.VolumeSource{Secret: &v1.SecretVolumeSource{SecretName: "same"}}},
				}
				p.Spec.Containers[0].EnvFrom = []v1.EnvFromSource{{ConfigMapRef: &v1.ConfigMapEnvSource{LocalObjectReference: v1.LocalObjectReference{Name: "same"}}}}
			},
			want: []objectKey{cmKey("same"), secKey("same")},
		},
		{
			name: "a CSI volume's publish secret is read by the driver's plugin, not here",
			mutate: func(p *v1.Pod) {
				p.Spec.Volumes = []v1.Volume{{Name: "csi", VolumeSource: v1.VolumeSource{CSI: &v1.CSIVolumeSource{Driver: "d", NodePublishSecretRef: &v1.LocalObjectReference{Name: "csi-sec"}}}}}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := basePod()
			tt.mutate(pod)
			got := slices.SortedFunc(maps.Keys(podReferences(pod)), compareKeys)
			want := slices.SortedFunc(slices.Values(tt.want), compareKeys)
			if !slices.Equal(got, want) {
				t.Errorf("podReferences() = %v, want %v", got, want)
			}
		})
	}
}

func compareKeys(a, b objectKey) int {
	if a.kind != b.kind {
		return int(a.kind) - int(b.kind)
	}
	if a.name < b.name {
		return -1
	}
	if a.name > b.name {
		return 1
	}
	return 0
}
