// Package kube is the agent's API client: the resources a node agent
// reads and writes, and nothing else.
//
// client-go's clientset is not used because of what it links: its scheme
// registers every API group the apiserver serves, and every typed client
// brings its apply configurations, so the agent's binary carried some
// 60 API groups it never talks to — and a Go binary's pages are most of
// its resident memory (BENCHMARKS.md). Here the scheme holds the eight
// group versions the agent uses, and each resource is one generic typed
// client (client-go's gentype) over one shared HTTP client.
//
// The interfaces keep client-go's method signatures, so client-go's typed
// clients satisfy them: tests wrap the fake clientset (package kubetest).
package kube

import (
	"context"
	"fmt"
	"net/http"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/gentype"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"
)

// Scheme holds the agent's group versions and metav1's options types
// (for query parameters). Events are recorded against it.
var Scheme = runtime.NewScheme()

var (
	codecs         = serializer.NewCodecFactory(Scheme)
	parameterCodec = runtime.NewParameterCodec(Scheme)
)

func init() {
	metav1.AddToGroupVersion(Scheme, schema.GroupVersion{Version: "v1"})
	utilruntime.Must(corev1.AddToScheme(Scheme))
	utilruntime.Must(coordinationv1.AddToScheme(Scheme))
	utilruntime.Must(storagev1.AddToScheme(Scheme))
	utilruntime.Must(certificatesv1.AddToScheme(Scheme))
	utilruntime.Must(authenticationv1.AddToScheme(Scheme))
	utilruntime.Must(authorizationv1.AddToScheme(Scheme))
	utilruntime.Must(nodev1.AddToScheme(Scheme))
}

// Creator creates objects of one resource.
type Creator[T runtime.Object] interface {
	Create(ctx context.Context, obj T, opts metav1.CreateOptions) (T, error)
}

// Resource is a typed client of one resource (in one namespace, or
// cluster-scoped): client-go's typed client methods the agent calls.
type Resource[T runtime.Object, L runtime.Object] interface {
	Creator[T]
	Get(ctx context.Context, name string, opts metav1.GetOptions) (T, error)
	List(ctx context.Context, opts metav1.ListOptions) (L, error)
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
	Update(ctx context.Context, obj T, opts metav1.UpdateOptions) (T, error)
	Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (T, error)
	Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error
}

// WithStatus is a Resource with a status subresource.
type WithStatus[T runtime.Object, L runtime.Object] interface {
	Resource[T, L]
	UpdateStatus(ctx context.Context, obj T, opts metav1.UpdateOptions) (T, error)
}

// ServiceAccountInterface adds TokenRequest (serviceaccounts/token).
type ServiceAccountInterface interface {
	Resource[*corev1.ServiceAccount, *corev1.ServiceAccountList]
	CreateToken(ctx context.Context, serviceAccountName string, tokenRequest *authenticationv1.TokenRequest, opts metav1.CreateOptions) (*authenticationv1.TokenRequest, error)
}

// The group versions, each with the resources the agent uses.
type (
	CoreV1Interface interface {
		Pods(namespace string) WithStatus[*corev1.Pod, *corev1.PodList]
		Nodes() WithStatus[*corev1.Node, *corev1.NodeList]
		Events(namespace string) Resource[*corev1.Event, *corev1.EventList]
		ConfigMaps(namespace string) Resource[*corev1.ConfigMap, *corev1.ConfigMapList]
		Secrets(namespace string) Resource[*corev1.Secret, *corev1.SecretList]
		Services(namespace string) Resource[*corev1.Service, *corev1.ServiceList]
		ServiceAccounts(namespace string) ServiceAccountInterface
		PersistentVolumeClaims(namespace string) WithStatus[*corev1.PersistentVolumeClaim, *corev1.PersistentVolumeClaimList]
		PersistentVolumes() WithStatus[*corev1.PersistentVolume, *corev1.PersistentVolumeList]
	}
	CoordinationV1Interface interface {
		Leases(namespace string) Resource[*coordinationv1.Lease, *coordinationv1.LeaseList]
	}
	StorageV1Interface interface {
		CSIDrivers() Resource[*storagev1.CSIDriver, *storagev1.CSIDriverList]
		CSINodes() Resource[*storagev1.CSINode, *storagev1.CSINodeList]
		VolumeAttachments() WithStatus[*storagev1.VolumeAttachment, *storagev1.VolumeAttachmentList]
	}
	CertificatesV1Interface interface {
		CertificateSigningRequests() WithStatus[*certificatesv1.CertificateSigningRequest, *certificatesv1.CertificateSigningRequestList]
		ClusterTrustBundles() Resource[*certificatesv1.ClusterTrustBundle, *certificatesv1.ClusterTrustBundleList]
		PodCertificateRequests(namespace string) WithStatus[*certificatesv1.PodCertificateRequest, *certificatesv1.PodCertificateRequestList]
	}
	AuthenticationV1Interface interface {
		TokenReviews() Creator[*authenticationv1.TokenReview]
	}
	AuthorizationV1Interface interface {
		SubjectAccessReviews() Creator[*authorizationv1.SubjectAccessReview]
	}
	NodeV1Interface interface {
		RuntimeClasses() Resource[*nodev1.RuntimeClass, *nodev1.RuntimeClassList]
	}
)

// Interface is the agent's API client.
type Interface interface {
	CoreV1() CoreV1Interface
	CoordinationV1() CoordinationV1Interface
	StorageV1() StorageV1Interface
	CertificatesV1() CertificatesV1Interface
	AuthenticationV1() AuthenticationV1Interface
	AuthorizationV1() AuthorizationV1Interface
	NodeV1() NodeV1Interface
}

// Client is the Interface over the apiserver: one REST client per group
// version, all on one HTTP client (one connection pool).
type Client struct {
	core, coordination, storage, certificates, authentication, authorization, node rest.Interface
}

// NewForConfig builds the client. The config's content type (protobuf or
// JSON), rate limits, user agent and credentials apply to every group.
func NewForConfig(cfg *rest.Config) (*Client, error) {
	base := *cfg
	if base.UserAgent == "" {
		base.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	base.NegotiatedSerializer = codecs.WithoutConversion()
	httpClient, err := rest.HTTPClientFor(&base)
	if err != nil {
		return nil, fmt.Errorf("kube: HTTP client: %w", err)
	}
	// One rate limiter for all groups, as the clientset shares one (rest
	// would build one per group version).
	if base.RateLimiter == nil && base.QPS > 0 {
		burst := base.Burst
		if burst <= 0 {
			burst = rest.DefaultBurst
		}
		base.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(base.QPS, burst)
	}
	c := &Client{}
	for _, g := range []struct {
		into *rest.Interface
		gv   schema.GroupVersion
	}{
		{&c.core, corev1.SchemeGroupVersion},
		{&c.coordination, coordinationv1.SchemeGroupVersion},
		{&c.storage, storagev1.SchemeGroupVersion},
		{&c.certificates, certificatesv1.SchemeGroupVersion},
		{&c.authentication, authenticationv1.SchemeGroupVersion},
		{&c.authorization, authorizationv1.SchemeGroupVersion},
		{&c.node, nodev1.SchemeGroupVersion},
	} {
		if *g.into, err = restClient(base, g.gv, httpClient); err != nil {
			return nil, err
		}
	}
	return c, nil
}

func restClient(cfg rest.Config, gv schema.GroupVersion, h *http.Client) (rest.Interface, error) {
	cfg.GroupVersion = &gv
	cfg.APIPath = "/apis"
	if gv.Group == "" {
		cfg.APIPath = "/api"
	}
	rc, err := rest.RESTClientForConfigAndClient(&cfg, h)
	if err != nil {
		return nil, fmt.Errorf("kube: %s client: %w", gv, err)
	}
	return rc, nil
}

func (c *Client) CoreV1() CoreV1Interface                 { return coreV1{c.core} }
func (c *Client) CoordinationV1() CoordinationV1Interface { return coordinationV1{c.coordination} }
func (c *Client) StorageV1() StorageV1Interface           { return storageV1{c.storage} }
func (c *Client) CertificatesV1() CertificatesV1Interface { return certificatesV1{c.certificates} }
func (c *Client) AuthenticationV1() AuthenticationV1Interface {
	return authenticationV1{c.authentication}
}
func (c *Client) AuthorizationV1() AuthorizationV1Interface { return authorizationV1{c.authorization} }
func (c *Client) NodeV1() NodeV1Interface                   { return nodeV1{c.node} }

// resource is a generic typed client with list support; protobuf is
// preferred for the built-in types, as client-go's clients do.
func resource[T interface {
	*E
	runtime.Object
	metav1.Object
}, L interface {
	*EL
	runtime.Object
}, E, EL any](rc rest.Interface, name, namespace string) *gentype.ClientWithList[T, L] {
	return gentype.NewClientWithList[T, L](name, rc, parameterCodec, namespace,
		func() T { return T(new(E)) }, func() L { return L(new(EL)) }, gentype.PrefersProtobuf[T]())
}

type coreV1 struct{ rc rest.Interface }

func (g coreV1) Pods(ns string) WithStatus[*corev1.Pod, *corev1.PodList] {
	return resource[*corev1.Pod, *corev1.PodList](g.rc, "pods", ns)
}
func (g coreV1) Nodes() WithStatus[*corev1.Node, *corev1.NodeList] {
	return resource[*corev1.Node, *corev1.NodeList](g.rc, "nodes", "")
}
func (g coreV1) Events(ns string) Resource[*corev1.Event, *corev1.EventList] {
	return resource[*corev1.Event, *corev1.EventList](g.rc, "events", ns)
}
func (g coreV1) ConfigMaps(ns string) Resource[*corev1.ConfigMap, *corev1.ConfigMapList] {
	return resource[*corev1.ConfigMap, *corev1.ConfigMapList](g.rc, "configmaps", ns)
}
func (g coreV1) Secrets(ns string) Resource[*corev1.Secret, *corev1.SecretList] {
	return resource[*corev1.Secret, *corev1.SecretList](g.rc, "secrets", ns)
}
func (g coreV1) Services(ns string) Resource[*corev1.Service, *corev1.ServiceList] {
	return resource[*corev1.Service, *corev1.ServiceList](g.rc, "services", ns)
}
func (g coreV1) ServiceAccounts(ns string) ServiceAccountInterface {
	return serviceAccounts{resource[*corev1.ServiceAccount, *corev1.ServiceAccountList](g.rc, "serviceaccounts", ns)}
}
func (g coreV1) PersistentVolumeClaims(ns string) WithStatus[*corev1.PersistentVolumeClaim, *corev1.PersistentVolumeClaimList] {
	return resource[*corev1.PersistentVolumeClaim, *corev1.PersistentVolumeClaimList](g.rc, "persistentvolumeclaims", ns)
}
func (g coreV1) PersistentVolumes() WithStatus[*corev1.PersistentVolume, *corev1.PersistentVolumeList] {
	return resource[*corev1.PersistentVolume, *corev1.PersistentVolumeList](g.rc, "persistentvolumes", "")
}

type serviceAccounts struct {
	*gentype.ClientWithList[*corev1.ServiceAccount, *corev1.ServiceAccountList]
}

// CreateToken posts a TokenRequest to serviceaccounts/NAME/token.
func (s serviceAccounts) CreateToken(ctx context.Context, name string, tr *authenticationv1.TokenRequest, opts metav1.CreateOptions) (*authenticationv1.TokenRequest, error) {
	result := &authenticationv1.TokenRequest{}
	err := s.GetClient().Post().
		Namespace(s.GetNamespace()).
		Resource("serviceaccounts").
		Name(name).
		SubResource("token").
		VersionedParams(&opts, parameterCodec).
		Body(tr).
		Do(ctx).
		Into(result)
	return result, err
}

type coordinationV1 struct{ rc rest.Interface }

func (g coordinationV1) Leases(ns string) Resource[*coordinationv1.Lease, *coordinationv1.LeaseList] {
	return resource[*coordinationv1.Lease, *coordinationv1.LeaseList](g.rc, "leases", ns)
}

type storageV1 struct{ rc rest.Interface }

func (g storageV1) CSIDrivers() Resource[*storagev1.CSIDriver, *storagev1.CSIDriverList] {
	return resource[*storagev1.CSIDriver, *storagev1.CSIDriverList](g.rc, "csidrivers", "")
}
func (g storageV1) CSINodes() Resource[*storagev1.CSINode, *storagev1.CSINodeList] {
	return resource[*storagev1.CSINode, *storagev1.CSINodeList](g.rc, "csinodes", "")
}
func (g storageV1) VolumeAttachments() WithStatus[*storagev1.VolumeAttachment, *storagev1.VolumeAttachmentList] {
	return resource[*storagev1.VolumeAttachment, *storagev1.VolumeAttachmentList](g.rc, "volumeattachments", "")
}

type certificatesV1 struct{ rc rest.Interface }

func (g certificatesV1) CertificateSigningRequests() WithStatus[*certificatesv1.CertificateSigningRequest, *certificatesv1.CertificateSigningRequestList] {
	return resource[*certificatesv1.CertificateSigningRequest, *certificatesv1.CertificateSigningRequestList](g.rc, "certificatesigningrequests", "")
}
func (g certificatesV1) ClusterTrustBundles() Resource[*certificatesv1.ClusterTrustBundle, *certificatesv1.ClusterTrustBundleList] {
	return resource[*certificatesv1.ClusterTrustBundle, *certificatesv1.ClusterTrustBundleList](g.rc, "clustertrustbundles", "")
}
func (g certificatesV1) PodCertificateRequests(ns string) WithStatus[*certificatesv1.PodCertificateRequest, *certificatesv1.PodCertificateRequestList] {
	return resource[*certificatesv1.PodCertificateRequest, *certificatesv1.PodCertificateRequestList](g.rc, "podcertificaterequests", ns)
}

type authenticationV1 struct{ rc rest.Interface }

func (g authenticationV1) TokenReviews() Creator[*authenticationv1.TokenReview] {
	return gentype.NewClient[*authenticationv1.TokenReview]("tokenreviews", g.rc, parameterCodec, "",
		func() *authenticationv1.TokenReview { return &authenticationv1.TokenReview{} }, gentype.PrefersProtobuf[*authenticationv1.TokenReview]())
}

type authorizationV1 struct{ rc rest.Interface }

func (g authorizationV1) SubjectAccessReviews() Creator[*authorizationv1.SubjectAccessReview] {
	return gentype.NewClient[*authorizationv1.SubjectAccessReview]("subjectaccessreviews", g.rc, parameterCodec, "",
		func() *authorizationv1.SubjectAccessReview { return &authorizationv1.SubjectAccessReview{} }, gentype.PrefersProtobuf[*authorizationv1.SubjectAccessReview]())
}

type nodeV1 struct{ rc rest.Interface }

func (g nodeV1) RuntimeClasses() Resource[*nodev1.RuntimeClass, *nodev1.RuntimeClassList] {
	return resource[*nodev1.RuntimeClass, *nodev1.RuntimeClassList](g.rc, "runtimeclasses", "")
}
