package volume

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sort"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/nodeagent/nodeagent/pkg/volume/atomic"
)

// projectedPayload merges every source into one payload, later sources
// overriding earlier ones at the same path. All sources are tried, and
// their errors reported together, so one event names every problem.
type projectedPayload struct {
	objects     objectSource
	tokens      *tokenSource
	podCerts    *podCertSource
	allocatable func() v1.ResourceList
}

func newProjectedPlugin(pp *projectedPayload, m mounter) *apiDataPlugin {
	return &apiDataPlugin{
		pluginName: projectedPluginName,
		supports:   func(vol *v1.Volume) bool { return vol.Projected != nil },
		onTmpfs:    true,
		mounter:    m,
		payload:    pp.payload,
	}
}

func (pp *projectedPayload) payload(ctx context.Context, req *setUpRequest) (map[string]atomic.FileProjection, error) {
	src := req.vol.Projected
	pod := req.pod
	out := map[string]atomic.FileProjection{}
	merge := func(m map[string]atomic.FileProjection) {
		for k, v := range m {
			out[k] = v
		}
	}
	// A credential file is 0600 when fsGroup is set: the ownership pass
	// then opens it to the group (0640), not to the world.
	credMode := fileMode(nil, src.DefaultMode)
	if req.fsGroup != nil {
		credMode = 0o600
	}
	var errs []error
	for i := range src.Sources {
		s := &src.Sources[i]
		switch {
		case s.Secret != nil:
			optional := s.Secret.Optional != nil && *s.Secret.Optional
			data, err := pp.objects.secretData(ctx, pod.Namespace, s.Secret.Name, optional)
			if err == nil {
				var m map[string]atomic.FileProjection
				m, err = keyPayload("secret "+s.Secret.Name, data, s.Secret.Items, src.DefaultMode, optional)
				merge(m)
			}
			errs = append(errs, err)
		case s.ConfigMap != nil:
			optional := s.ConfigMap.Optional != nil && *s.ConfigMap.Optional
			data, err := pp.objects.configMapData(ctx, pod.Namespace, s.ConfigMap.Name, optional)
			if err == nil {
				var m map[string]atomic.FileProjection
				m, err = keyPayload("configMap "+s.ConfigMap.Name, data, s.ConfigMap.Items, src.DefaultMode, optional)
				merge(m)
			}
			errs = append(errs, err)
		case s.DownwardAPI != nil:
			m, err := downwardAPIPayload(pod, s.DownwardAPI.Items, src.DefaultMode, pp.allocatable())
			merge(m)
			errs = append(errs, err)
		case s.ServiceAccountToken != nil:
			tok, err := pp.tokens.token(ctx, pod, s.ServiceAccountToken)
			if err == nil {
				out[s.ServiceAccountToken.Path] = atomic.FileProjection{Data: []byte(tok), Mode: credMode}
			}
			errs = append(errs, err)
		case s.ClusterTrustBundle != nil:
			data, err := pp.trustBundle(ctx, s.ClusterTrustBundle)
			if err == nil {
				out[s.ClusterTrustBundle.Path] = atomic.FileProjection{Data: data, Mode: credMode}
			}
			errs = append(errs, err)
		case s.PodCertificate != nil:
			key, chain, err := pp.podCerts.credential(ctx, pod, req.vol.Name, i, s.PodCertificate)
			if err == nil {
				podCertFiles(out, s.PodCertificate, key, chain, credMode)
			}
			errs = append(errs, err)
		default:
			errs = append(errs, fmt.Errorf("projected source %d has no known kind", i))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return out, nil
}

// trustBundle returns the PEM of one ClusterTrustBundle by name, or of all
// bundles of a signer matching the selector, deduplicated and sorted so the
// file does not change when nothing did.
func (pp *projectedPayload) trustBundle(ctx context.Context, ctb *v1.ClusterTrustBundleProjection) ([]byte, error) {
	optional := ctb.Optional != nil && *ctb.Optional
	client := pp.objects.client
	if client == nil {
		return nil, fmt.Errorf("clusterTrustBundle: no API client")
	}
	bundles := client.CertificatesV1().ClusterTrustBundles()
	var pems []string
	switch {
	case ctb.Name != nil:
		b, err := bundles.Get(ctx, *ctb.Name, metav1.GetOptions{})
		if err != nil {
			if optional && apierrors.IsNotFound(err) {
				return []byte{}, nil
			}
			return nil, fmt.Errorf("clusterTrustBundle %s: %w", *ctb.Name, err)
		}
		pems = append(pems, b.Spec.TrustBundle)
	case ctb.SignerName != nil:
		sel := labels.Nothing()
		if ctb.LabelSelector != nil {
			var err error
			if sel, err = metav1.LabelSelectorAsSelector(ctb.LabelSelector); err != nil {
				return nil, fmt.Errorf("clusterTrustBundle labelSelector: %w", err)
			}
		}
		list, err := bundles.List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
		if err != nil {
			return nil, fmt.Errorf("clusterTrustBundles of signer %s: %w", *ctb.SignerName, err)
		}
		for _, b := range list.Items {
			if b.Spec.SignerName == *ctb.SignerName && sel.Matches(labels.Set(b.Labels)) {
				pems = append(pems, b.Spec.TrustBundle)
			}
		}
	default:
		return nil, fmt.Errorf("clusterTrustBundle projection needs name or signerName")
	}
	if len(pems) == 0 {
		if optional {
			return []byte{}, nil
		}
		return nil, fmt.Errorf("clusterTrustBundle: no bundle matched")
	}
	sort.Strings(pems)
	var buf bytes.Buffer
	for i, p := range pems {
		if i > 0 && p == pems[i-1] {
			continue
		}
		buf.WriteString(p)
		if !bytes.HasSuffix(buf.Bytes(), []byte("\n")) {
			buf.WriteByte('\n')
		}
	}
	return buf.Bytes(), nil
}
