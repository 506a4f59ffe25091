package config

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"strings"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"
)

// Annotations the agent puts on the pods it runs, as the kubelet names
// them.
const (
	// AnnotationSource says where a pod came from: SourceFile for a
	// manifest in the static pod directory, SourceHTTP for one read from
	// staticPodURL.
	AnnotationSource = "kubernetes.io/config.source"
	// AnnotationHash is a static pod's hash, which is also its UID.
	AnnotationHash = "kubernetes.io/config.hash"
	// AnnotationSeen is when the agent first saw the pod (RFC 3339, ns).
	AnnotationSeen = "kubernetes.io/config.seen"
	// AnnotationMirror marks a mirror pod: the apiserver's copy of a
	// static pod; its value is the static pod's hash.
	AnnotationMirror = "kubernetes.io/config.mirror"
	// SourceFile is the source of a pod read from staticPodPath.
	SourceFile = "file"
	// SourceHTTP is the source of a pod read from staticPodURL.
	SourceHTTP = "http"
	// SourceAPI is the source of a pod read from the apiserver.
	SourceAPI = "api"
)

// IsStatic says whether the pod came from a manifest rather than the
// apiserver.
func IsStatic(pod *v1.Pod) bool {
	src, ok := pod.Annotations[AnnotationSource]
	return ok && src != SourceAPI
}

// IsMirror says whether the pod is the apiserver's copy of a static pod.
func IsMirror(pod *v1.Pod) bool {
	_, ok := pod.Annotations[AnnotationMirror]
	return ok
}

// maxManifestSize is the largest manifest read, as the kubelet's limit.
const maxManifestSize = 10 << 20

// errNotAPod marks a manifest that does not hold a v1 Pod.
var errNotAPod = errors.New("not a v1 Pod")

// decodeStaticPod turns one manifest file (YAML or JSON) into the pod the
// agent runs, as makeStaticPod makes it.
func decodeStaticPod(path string, data []byte, nodeName string) (*v1.Pod, error) {
	doc, tm, err := decodeManifest(data)
	if err != nil {
		return nil, err
	}
	if tm.APIVersion != "v1" || tm.Kind != "Pod" {
		return nil, fmt.Errorf("%w: apiVersion %q kind %q", errNotAPod, tm.APIVersion, tm.Kind)
	}
	pod := &v1.Pod{}
	// Unknown fields are ignored, as the apiserver's decoder does.
	if err := json.Unmarshal(doc, pod); err != nil {
		return nil, fmt.Errorf("decode pod: %w", err)
	}
	return makeStaticPod(pod, "file:"+path, nodeName)
}

// decodeManifest reads a manifest's YAML or JSON as JSON, and its type.
func decodeManifest(data []byte) ([]byte, metav1.TypeMeta, error) {
	var tm metav1.TypeMeta
	doc, err := yaml.YAMLToJSON(trimBOM(data))
	if err != nil {
		return nil, tm, fmt.Errorf("not valid YAML or JSON: %w", err)
	}
	if err := json.Unmarshal(doc, &tm); err != nil {
		return nil, tm, fmt.Errorf("%w: %v", errNotAPod, err)
	}
	return doc, tm, nil
}

// makeStaticPod makes a decoded pod the pod the agent runs, as the kubelet
// makes it from a manifest: the API's defaults applied, the UID a hash of
// the defaulted pod, the node and origin (where the manifest was read:
// "file:<path>" or "url:<URL>"), the name suffixed with the node's name,
// the namespace defaulted, the pod bound to the node, the hash annotation
// and a toleration of every NoExecute taint. The source and first-seen
// annotations are the source's to add.
func makeStaticPod(pod *v1.Pod, origin, nodeName string) (*v1.Pod, error) {
	if pod.Name == "" {
		return nil, errors.New("invalid pod: metadata.name is required")
	}
	applyAPIDefaults(pod)
	if pod.UID == "" {
		uid, err := staticPodUID(pod, origin, nodeName)
		if err != nil {
			return nil, err
		}
		pod.UID = uid
	}
	pod.Name = pod.Name + "-" + strings.ToLower(nodeName)
	if pod.Namespace == "" {
		pod.Namespace = metav1.NamespaceDefault
	}
	pod.Spec.NodeName = nodeName
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	pod.Annotations[AnnotationHash] = string(pod.UID)
	tolerateNoExecute(pod)
	pod.Status = v1.PodStatus{Phase: v1.PodPending}
	if err := validateStaticPod(pod); err != nil {
		return nil, fmt.Errorf("invalid pod: %w", err)
	}
	return pod, nil
}

// staticPodUID hashes the defaulted pod as written (before the agent adds
// its name suffix and annotations), then the node and the manifest's
// origin ("file:<path>", "url:<URL>"): the kubelet's recipe in idea (it
// hashes its internal object, which this agent does not have; the JSON
// form is the same content, in a stable order). Any change to the
// manifest gives another UID, so a changed manifest is a new pod; the
// same pod read from a file and from a URL are two pods.
func staticPodUID(pod *v1.Pod, origin, nodeName string) (types.UID, error) {
	doc, err := json.Marshal(pod)
	if err != nil {
		return "", fmt.Errorf("hash pod: %w", err)
	}
	h := fnv.New128a()
	h.Write(doc)
	fmt.Fprintf(h, "host:%s", nodeName)
	io.WriteString(h, origin)
	return types.UID(hex.EncodeToString(h.Sum(nil))), nil
}

// tolerateNoExecute adds the toleration of every NoExecute taint the
// kubelet gives static pods, so that taints never evict them.
func tolerateNoExecute(pod *v1.Pod) {
	want := v1.Toleration{Operator: v1.TolerationOpExists, Effect: v1.TaintEffectNoExecute}
	for _, t := range pod.Spec.Tolerations {
		if t.MatchToleration(&want) {
			return
		}
	}
	pod.Spec.Tolerations = append(pod.Spec.Tolerations, want)
}

// validateStaticPod checks what the agent relies on: names it can use in
// paths, cgroups and the apiserver, at least one container, each with a
// unique name and an image, and nothing that needs an API object. It is
// not the apiserver's full validation (the agent does not import it);
// the apiserver still judges the mirror pod.
func validateStaticPod(pod *v1.Pod) error {
	var errs []string
	for _, msg := range validation.IsDNS1123Subdomain(pod.Name) {
		errs = append(errs, fmt.Sprintf("metadata.name %q: %s", pod.Name, msg))
	}
	for _, msg := range validation.IsDNS1123Label(pod.Namespace) {
		errs = append(errs, fmt.Sprintf("metadata.namespace %q: %s", pod.Namespace, msg))
	}
	if len(pod.Spec.Containers) == 0 {
		errs = append(errs, "spec.containers: at least one container is required")
	}
	names := map[string]bool{}
	check := func(field string, c *v1.Container) {
		for _, msg := range validation.IsDNS1123Label(c.Name) {
			errs = append(errs, fmt.Sprintf("%s.name %q: %s", field, c.Name, msg))
		}
		if names[c.Name] {
			errs = append(errs, fmt.Sprintf("%s.name %q: duplicate container name", field, c.Name))
		}
		names[c.Name] = true
		if strings.TrimSpace(c.Image) == "" {
			errs = append(errs, fmt.Sprintf("%s.image: required", field))
		}
	}
	for i := range pod.Spec.InitContainers {
		check(fmt.Sprintf("spec.initContainers[%d]", i), &pod.Spec.InitContainers[i])
	}
	for i := range pod.Spec.Containers {
		check(fmt.Sprintf("spec.containers[%d]", i), &pod.Spec.Containers[i])
	}
	if len(pod.Spec.EphemeralContainers) > 0 {
		errs = append(errs, "spec.ephemeralContainers: not allowed in a static pod")
	}
	switch pod.Spec.RestartPolicy {
	case v1.RestartPolicyAlways, v1.RestartPolicyOnFailure, v1.RestartPolicyNever:
	default:
		errs = append(errs, fmt.Sprintf("spec.restartPolicy: unsupported value %q", pod.Spec.RestartPolicy))
	}
	if ref := apiObjectReference(pod); ref != "" {
		errs = append(errs, "static pods may not reference "+ref)
	}
	if len(errs) > 0 {
		return errors.New(strings.Join(errs, "; "))
	}
	return nil
}

// apiObjectReference names the first kind of API object the pod needs,
// or "". A static pod may run before any apiserver exists, and the node's
// authorizer only lets it read objects of pods bound to it, so the
// kubelet refuses these; so does the agent.
func apiObjectReference(pod *v1.Pod) string {
	if pod.Spec.ServiceAccountName != "" || pod.Spec.DeprecatedServiceAccount != "" {
		return "serviceaccounts"
	}
	if len(pod.Spec.ImagePullSecrets) > 0 {
		return "secrets"
	}
	for _, c := range allContainers(pod) {
		for _, e := range c.EnvFrom {
			if e.SecretRef != nil {
				return "secrets"
			}
			if e.ConfigMapRef != nil {
				return "configmaps"
			}
		}
		for _, e := range c.Env {
			if e.ValueFrom == nil {
				continue
			}
			if e.ValueFrom.SecretKeyRef != nil {
				return "secrets"
			}
			if e.ValueFrom.ConfigMapKeyRef != nil {
				return "configmaps"
			}
		}
	}
	if len(pod.Spec.ResourceClaims) > 0 {
		return "resourceclaims"
	}
	for _, v := range pod.Spec.Volumes {
		switch {
		case v.ConfigMap != nil:
			return "configmaps (via configmap volumes)"
		case v.Secret != nil:
			return "secrets (via secret volumes)"
		case v.CSI != nil:
			return "csidrivers (via CSI volumes)"
		case v.PersistentVolumeClaim != nil:
			return "persistentvolumeclaims"
		case v.Ephemeral != nil:
			return "persistentvolumeclaims (via ephemeral volumes)"
		case v.Projected != nil:
			for _, s := range v.Projected.Sources {
				switch {
				case s.ConfigMap != nil:
					return "configmaps (via projected volumes)"
				case s.Secret != nil:
					return "secrets (via projected volumes)"
				case s.ServiceAccountToken != nil:
					return "serviceaccounts (via projected volumes)"
				case s.ClusterTrustBundle != nil:
					return "clustertrustbundles"
				case s.PodCertificate != nil:
					return "podcertificates"
				}
			}
		}
	}
	return ""
}

func allContainers(pod *v1.Pod) []*v1.Container {
	out := make([]*v1.Container, 0, len(pod.Spec.InitContainers)+len(pod.Spec.Containers))
	for i := range pod.Spec.InitContainers {
		out = append(out, &pod.Spec.InitContainers[i])
	}
	for i := range pod.Spec.Containers {
		out = append(out, &pod.Spec.Containers[i])
	}
	return out
}

// trimBOM drops a UTF-8 byte order mark, which some editors write and
// the YAML parser refuses.
func trimBOM(data []byte) []byte {
	return bytes.TrimPrefix(data, []byte("\xef\xbb\xbf"))
}
