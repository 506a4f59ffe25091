// Package kubetest adapts client-go's clientset (its fake, in unit tests)
// to kube.Interface. Only tests import it: it links the clientset the
// agent does without.
package kubetest

import (
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/watchlist"

	"github.com/nodeagent/nodeagent/pkg/kube"
)

// Wrap returns cs as a kube.Interface.
func Wrap(cs kubernetes.Interface) kube.Interface { return client{cs} }

type client struct{ cs kubernetes.Interface }

func (c client) CoreV1() kube.CoreV1Interface                 { return coreV1{c.cs} }
func (c client) CoordinationV1() kube.CoordinationV1Interface { return coordinationV1{c.cs} }
func (c client) StorageV1() kube.StorageV1Interface           { return storageV1{c.cs} }
func (c client) CertificatesV1() kube.CertificatesV1Interface { return certificatesV1{c.cs} }
func (c client) AuthenticationV1() kube.AuthenticationV1Interface {
	return authenticationV1{c.cs}
}
func (c client) AuthorizationV1() kube.AuthorizationV1Interface { return authorizationV1{c.cs} }
func (c client) NodeV1() kube.NodeV1Interface                   { return nodeV1{c.cs} }

type coreV1 struct{ cs kubernetes.Interface }

func (g coreV1) Pods(ns string) kube.WithStatus[*corev1.Pod, *corev1.PodList] {
	return g.cs.CoreV1().Pods(ns)
}
func (g coreV1) Nodes() kube.WithStatus[*corev1.Node, *corev1.NodeList] {
	return g.cs.CoreV1().Nodes()
}
func (g coreV1) Events(ns string) kube.Resource[*corev1.Event, *corev1.EventList] {
	return g.cs.CoreV1().Events(ns)
}
func (g coreV1) ConfigMaps(ns string) kube.Resource[*corev1.ConfigMap, *corev1.ConfigMapList] {
	return g.cs.CoreV1().ConfigMaps(ns)
}
func (g coreV1) Secrets(ns string) kube.Resource[*corev1.Secret, *corev1.SecretList] {
	return g.cs.CoreV1().Secrets(ns)
}
func (g coreV1) Services(ns string) kube.Resource[*corev1.Service, *corev1.ServiceList] {
	return g.cs.CoreV1().Services(ns)
}
func (g coreV1) ServiceAccounts(ns string) kube.ServiceAccountInterface {
	return g.cs.CoreV1().ServiceAccounts(ns)
}
func (g coreV1) PersistentVolumeClaims(ns string) kube.WithStatus[*corev1.PersistentVolumeClaim, *corev1.PersistentVolumeClaimList] {
	return g.cs.CoreV1().PersistentVolumeClaims(ns)
}
func (g coreV1) PersistentVolumes() kube.WithStatus[*corev1.PersistentVolume, *corev1.PersistentVolumeList] {
	return g.cs.CoreV1().PersistentVolumes()
}

type coordinationV1 struct{ cs kubernetes.Interface }

func (g coordinationV1) Leases(ns string) kube.Resource[*coordinationv1.Lease, *coordinationv1.LeaseList] {
	return g.cs.CoordinationV1().Leases(ns)
}

type storageV1 struct{ cs kubernetes.Interface }

func (g storageV1) CSIDrivers() kube.Resource[*storagev1.CSIDriver, *storagev1.CSIDriverList] {
	return g.cs.StorageV1().CSIDrivers()
}
func (g storageV1) CSINodes() kube.Resource[*storagev1.CSINode, *storagev1.CSINodeList] {
	return g.cs.StorageV1().CSINodes()
}
func (g storageV1) VolumeAttachments() kube.WithStatus[*storagev1.VolumeAttachment, *storagev1.VolumeAttachmentList] {
	return g.cs.StorageV1().VolumeAttachments()
}

type certificatesV1 struct{ cs kubernetes.Interface }

func (g certificatesV1) CertificateSigningRequests() kube.WithStatus[*certificatesv1.CertificateSigningRequest, *certificatesv1.CertificateSigningRequestList] {
	return g.cs.CertificatesV1().CertificateSigningRequests()
}
func (g certificatesV1) ClusterTrustBundles() kube.Resource[*certificatesv1.ClusterTrustBundle, *certificatesv1.ClusterTrustBundleList] {
	return g.cs.CertificatesV1().ClusterTrustBundles()
}
func (g certificatesV1) PodCertificateRequests(ns string) kube.WithStatus[*certificatesv1.PodCertificateRequest, *certificatesv1.PodCertificateRequestList] {
	return g.cs.CertificatesV1().PodCertificateRequests(ns)
}

type authenticationV1 struct{ cs kubernetes.Interface }

func (g authenticationV1) TokenReviews() kube.Creator[*authenticationv1.TokenReview] {
	return g.cs.AuthenticationV1().TokenReviews()
}

type authorizationV1 struct{ cs kubernetes.Interface }

func (g authorizationV1) SubjectAccessReviews() kube.Creator[*authorizationv1.SubjectAccessReview] {
	return g.cs.AuthorizationV1().SubjectAccessReviews()
}

type nodeV1 struct{ cs kubernetes.Interface }

func (g nodeV1) RuntimeClasses() kube.Resource[*nodev1.RuntimeClass, *nodev1.RuntimeClassList] {
	return g.cs.NodeV1().RuntimeClasses()
}

// IsWatchListSemanticsUnSupported passes on the fake's answer: informers
// over it list, then watch (the fake serves no watch-list stream).
func (c client) IsWatchListSemanticsUnSupported() bool {
	return watchlist.DoesClientNotSupportWatchListSemantics(c.cs)
}
