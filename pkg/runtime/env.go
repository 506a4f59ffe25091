package runtime

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodeagent/nodeagent/pkg/downward"
	"github.com/nodeagent/nodeagent/pkg/expansion"
)

// EnvSource is where a container's environment references are read from.
type EnvSource interface {
	GetConfigMap(ctx context.Context, namespace, name string) (*v1.ConfigMap, error)
	GetSecret(ctx context.Context, namespace, name string) (*v1.Secret, error)
	// ListServices returns the services of one namespace.
	ListServices(ctx context.Context, namespace string) ([]*v1.Service, error)
}

// EnvInputs is what a container's environment is resolved from beside
// its spec.
type EnvInputs struct {
	// Source reads configMaps, secrets and services.
	Source EnvSource
	// PodIPs are the sandbox's addresses, primary first (the node's for
	// a host-network pod).
	PodIPs []string
	// HostIPs are the node's addresses, primary first.
	HostIPs []string
	// Allocatable stands in for the limits a container does not set, for
	// resourceFieldRef.
	Allocatable v1.ResourceList
	// Warn reports what the kubelet reports as a warning event on the
	// pod (reason, message) without failing the container.
	Warn func(reason, message string)
}

// EventInvalidEnvNames is the reason of the warning about envFrom keys
// that cannot be variable names at all (an '=', a control or non-ASCII
// character). Since RelaxedEnvironmentVariableValidation (GA in 1.34) the
// kubelet passes every other name through, digits and dashes first included;
// so does the agent.
const EventInvalidEnvNames = "InvalidEnvironmentVariableNames"

// ErrServicesNotSynced is what an EnvSource returns while it has not yet
// seen the services once: a container created then would miss their
// variables, so it waits (static pods excepted: they may be what brings
// the apiserver up).
var ErrServicesNotSynced = errors.New("services have not yet been read at least once, cannot construct envvars")

// annotationConfigSource names where a pod came from, as the kubelet
// marks it: "api" for the apiserver, "file" or "http" for static pods.
const annotationConfigSource = "kubernetes.io/config.source"

// isStaticPod says whether the pod came from a manifest rather than the
// apiserver.
func isStaticPod(pod *v1.Pod) bool {
	src, ok := pod.Annotations[annotationConfigSource]
	return ok && src != "api"
}

// masterServiceName is the default namespace's service whose variables
// every pod gets, whatever its enableServiceLinks.
const masterServiceName = "kubernetes"

// ResolvedEnv is a container's environment in order.
type ResolvedEnv struct {
	Vars []*runtimeapi.KeyValue
}

// Map returns the environment as a map, for $(VAR) expansion.
func (e ResolvedEnv) Map() map[string]string {
	m := make(map[string]string, len(e.Vars))
	for _, kv := range e.Vars {
		m[kv.Key] = string(kv.Value)
	}
	return m
}

// ResolveEnv computes a container's environment as the kubelet does:
// envFrom sources first (later ones win), then env in declaration order
// (overriding envFrom, with $(VAR) expanded against what came before and
// the service variables), then the service variables not set otherwise.
// An error names the reference that could not be resolved; the container
// must not be created.
func ResolveEnv(ctx context.Context, pod *v1.Pod, c *v1.Container, in EnvInputs) (ResolvedEnv, error) {
	services, err := serviceEnv(ctx, pod, in.Source)
	if errors.Is(err, ErrServicesNotSynced) && isStaticPod(pod) {
		services, err = map[string]string{}, nil
	}
	if err != nil {
		return ResolvedEnv{}, err
	}
	r := envResolver{ctx: ctx, pod: pod, in: in, configMaps: map[string]*v1.ConfigMap{}, secrets: map[string]*v1.Secret{}}
	env := map[string]string{}
	var order []string
	set := func(k, v string) {
		if _, ok := env[k]; !ok {
			order = append(order, k)
		}
		env[k] = v
	}

	for _, from := range c.EnvFrom {
		data, kind, name, ok, err := r.envFromData(from)
		if err != nil {
			return ResolvedEnv{}, err
		}
		if !ok {
			continue
		}
		var invalid []string
		for _, k := range sortedNames(data) {
			key := from.Prefix + k
			if len(validation.IsRelaxedEnvVarName(key)) != 0 {
				invalid = append(invalid, key)
				continue
			}
			set(key, data[k])
		}
		if len(invalid) > 0 && in.Warn != nil {
			in.Warn(EventInvalidEnvNames, fmt.Sprintf("Keys [%s] from the EnvFrom %s %s/%s were skipped since they are considered invalid environment variable names.",
				strings.Join(invalid, ", "), kind, pod.Namespace, name))
		}
	}

	lookup := lookupIn(env, services)
	for _, e := range c.Env {
		v := e.Value
		switch {
		case v != "":
			v = expansion.Expand(v, lookup)
		case e.ValueFrom != nil:
			var ok bool
			v, ok, err = r.valueFrom(c, e.ValueFrom)
			if err != nil {
				return ResolvedEnv{}, err
			}
			if !ok {
				continue
			}
		}
		set(e.Name, v)
	}

	out := ResolvedEnv{}
	for _, k := range order {
		out.Vars = append(out.Vars, &runtimeapi.KeyValue{Key: k, Value: []byte(env[k])})
	}
	for _, k := range sortedNames(services) {
		if _, ok := env[k]; !ok {
			out.Vars = append(out.Vars, &runtimeapi.KeyValue{Key: k, Value: []byte(services[k])})
		}
	}
	return out, nil
}

// envResolver reads each configMap and secret once per container.
type envResolver struct {
	ctx        context.Context
	pod        *v1.Pod
	in         EnvInputs
	configMaps map[string]*v1.ConfigMap
	secrets    map[string]*v1.Secret
}

var errNoSource = errors.New("no source of configMaps and secrets")

// configMap returns the named configMap, or nil without an error when it
// does not exist and the reference is optional.
func (r *envResolver) configMap(name string, optional bool) (*v1.ConfigMap, error) {
	if cm, ok := r.configMaps[name]; ok {
		return cm, nil
	}
	if r.in.Source == nil {
		return nil, fmt.Errorf("couldn't get configMap %s/%s: %w", r.pod.Namespace, name, errNoSource)
	}
	cm, err := r.in.Source.GetConfigMap(r.ctx, r.pod.Namespace, name)
	if apierrors.IsNotFound(err) {
		if optional {
			return nil, nil
		}
		// The kubelet's message: its cache names the resource in the singular.
		return nil, fmt.Errorf("configmap %q not found", name)
	}
	if err != nil {
		return nil, fmt.Errorf("couldn't get configMap %s/%s: %w", r.pod.Namespace, name, err)
	}
	r.configMaps[name] = cm
	return cm, nil
}

func (r *envResolver) secret(name string, optional bool) (*v1.Secret, error) {
	if s, ok := r.secrets[name]; ok {
		return s, nil
	}
	if r.in.Source == nil {
		return nil, fmt.Errorf("couldn't get secret %s/%s: %w", r.pod.Namespace, name, errNoSource)
	}
	s, err := r.in.Source.GetSecret(r.ctx, r.pod.Namespace, name)
	if apierrors.IsNotFound(err) {
		if optional {
			return nil, nil
		}
		return nil, fmt.Errorf("secret %q not found", name)
	}
	if err != nil {
		return nil, fmt.Errorf("couldn't get secret %s/%s: %w", r.pod.Namespace, name, err)
	}
	r.secrets[name] = s
	return s, nil
}

// envFromData returns the key/values of one envFrom source, its kind and
// name for messages, and false when an optional source is missing.
func (r *envResolver) envFromData(from v1.EnvFromSource) (map[string]string, string, string, bool, error) {
	switch {
	case from.ConfigMapRef != nil:
		name := from.ConfigMapRef.Name
		cm, err := r.configMap(name, isTrue(from.ConfigMapRef.Optional))
		if err != nil || cm == nil {
			return nil, "", "", false, err
		}
		return cm.Data, "configMap", name, true, nil
	case from.SecretRef != nil:
		name := from.SecretRef.Name
		s, err := r.secret(name, isTrue(from.SecretRef.Optional))
		if err != nil || s == nil {
			return nil, "", "", false, err
		}
		data := make(map[string]string, len(s.Data))
		for k, v := range s.Data {
			data[k] = string(v)
		}
		return data, "secret", name, true, nil
	}
	return nil, "", "", false, nil
}

// valueFrom resolves one env var's source; false means an optional
// reference is missing and the variable is left out.
func (r *envResolver) valueFrom(c *v1.Container, from *v1.EnvVarSource) (string, bool, error) {
	switch {
	case from.FieldRef != nil:
		v, err := downward.FieldValue(r.pod, from.FieldRef, downward.Env, r.downward())
		return v, err == nil, err
	case from.ResourceFieldRef != nil:
		v, err := downward.ResourceValue(r.pod, c, from.ResourceFieldRef, downward.Env, r.downward())
		return v, err == nil, err
	case from.ConfigMapKeyRef != nil:
		ref := from.ConfigMapKeyRef
		optional := isTrue(ref.Optional)
		cm, err := r.configMap(ref.Name, optional)
		if err != nil || cm == nil {
			return "", false, err
		}
		v, ok := cm.Data[ref.Key]
		if !ok {
			if optional {
				return "", false, nil
			}
			return "", false, fmt.Errorf("couldn't find key %s in ConfigMap %s/%s", ref.Key, r.pod.Namespace, ref.Name)
		}
		return v, true, nil
	case from.SecretKeyRef != nil:
		ref := from.SecretKeyRef
		optional := isTrue(ref.Optional)
		s, err := r.secret(ref.Name, optional)
		if err != nil || s == nil {
			return "", false, err
		}
		v, ok := s.Data[ref.Key]
		if !ok {
			if optional {
				return "", false, nil
			}
			return "", false, fmt.Errorf("couldn't find key %s in Secret %s/%s", ref.Key, r.pod.Namespace, ref.Name)
		}
		return string(v), true, nil
	}
	return "", true, nil
}

// downward is what the downward API reads beside the pod.
func (r *envResolver) downward() downward.Inputs {
	return downward.Inputs{PodIPs: r.in.PodIPs, HostIPs: r.in.HostIPs, Allocatable: r.in.Allocatable}
}

// serviceEnv is the service variables a pod's containers get: the
// default namespace's kubernetes service always, and the services of the
// pod's namespace when service links are enabled (a same-named service
// of the pod's namespace wins).
func serviceEnv(ctx context.Context, pod *v1.Pod, src EnvSource) (map[string]string, error) {
	out := map[string]string{}
	if src == nil {
		return out, nil
	}
	chosen := map[string]*v1.Service{}
	defaults, err := src.ListServices(ctx, "default")
	if errors.Is(err, ErrServicesNotSynced) {
		return nil, err
	}
	if err != nil {
		return nil, fmt.Errorf("failed to list services when setting up env vars: %w", err)
	}
	for _, s := range defaults {
		if s.Name == masterServiceName && hasClusterIP(s) {
			chosen[s.Name] = s
		}
	}
	links := pod.Spec.EnableServiceLinks == nil || *pod.Spec.EnableServiceLinks
	if links {
		own := defaults
		if pod.Namespace != "default" {
			if own, err = src.ListServices(ctx, pod.Namespace); err != nil {
				return nil, fmt.Errorf("failed to list services when setting up env vars: %w", err)
			}
		}
		for _, s := range own {
			if hasClusterIP(s) {
				chosen[s.Name] = s
			}
		}
	}
	for _, s := range chosen {
		for _, kv := range serviceVars(s) {
			out[kv[0]] = kv[1]
		}
	}
	return out, nil
}

func hasClusterIP(s *v1.Service) bool {
	return s.Spec.ClusterIP != "" && s.Spec.ClusterIP != v1.ClusterIPNone
}

// serviceVars are one service's variables: FOO_SERVICE_HOST/PORT (and a
// _PORT_<NAME> per named port) and Docker's link variables.
func serviceVars(s *v1.Service) [][2]string {
	prefix := strings.ToUpper(strings.ReplaceAll(s.Name, "-", "_"))
	ip := s.Spec.ClusterIP
	out := [][2]string{{prefix + "_SERVICE_HOST", ip}}
	if len(s.Spec.Ports) == 0 {
		return out
	}
	out = append(out, [2]string{prefix + "_SERVICE_PORT", strconv.Itoa(int(s.Spec.Ports[0].Port))})
	for _, p := range s.Spec.Ports {
		if p.Name != "" {
			out = append(out, [2]string{prefix + "_SERVICE_PORT_" + strings.ToUpper(strings.ReplaceAll(p.Name, "-", "_")), strconv.Itoa(int(p.Port))})
		}
	}
	for i, p := range s.Spec.Ports {
		proto := string(v1.ProtocolTCP)
		if p.Protocol != "" {
			proto = string(p.Protocol)
		}
		lower := strings.ToLower(proto)
		port := strconv.Itoa(int(p.Port))
		url := lower + "://" + joinHostPort(ip, port)
		if i == 0 {
			out = append(out, [2]string{prefix + "_PORT", url})
		}
		pp := prefix + "_PORT_" + port + "_" + strings.ToUpper(proto)
		out = append(out,
			[2]string{pp, url},
			[2]string{pp + "_PROTO", lower},
			[2]string{pp + "_PORT", port},
			[2]string{pp + "_ADDR", ip})
	}
	return out
}

func joinHostPort(host, port string) string {
	if strings.Contains(host, ":") {
		return "[" + host + "]:" + port
	}
	return host + ":" + port
}

func isTrue(b *bool) bool { return b != nil && *b }

func sortedNames(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
