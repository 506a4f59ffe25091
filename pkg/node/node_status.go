package node

import (
	"fmt"
	"net"
	goruntime "runtime"
	"sort"
	"strings"

	v1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/ptr"
)

// maxNamesPerImage is how many names of one image the status lists.
const maxNamesPerImage = 5

// observation is everything the node status is computed from at one tick.
type observation struct {
	machine   Machine
	addresses []v1.NodeAddress
	version   *runtimeapi.VersionResponse // nil when the runtime did not answer
	status    *runtimeapi.StatusResponse  // nil when the runtime did not answer
	images    []*runtimeapi.Image         // nil when the list failed
	notReady  error                       // why the node is not Ready; nil when it is
	// volumesInUse are the attachable volumes mounted or being mounted.
	volumesInUse []v1.UniqueVolumeName
	// pressure are the resource-pressure conditions the node has.
	pressure []v1.NodeConditionType
}

// initialNode is the Node the agent creates: metadata and spec from the
// configuration, status from the first observation.
func initialNode(cfg *Config, obs observation, now metav1.Time) *v1.Node {
	n := configuredNode(cfg)
	setStatus(cfg, n, obs, now)
	return n
}

// configuredNode is the Node's metadata and spec as the configuration
// makes them: the agent's labels and the --node-labels, the attach-detach
// annotation, the registration taints and the provider ID.
func configuredNode(cfg *Config) *v1.Node {
	n := &v1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: cfg.NodeName,
			Labels: map[string]string{
				v1.LabelHostname:   cfg.Hostname,
				v1.LabelOSStable:   goruntime.GOOS,
				v1.LabelArchStable: goruntime.GOARCH,
				labelBetaOS:        goruntime.GOOS,
				labelBetaArch:      goruntime.GOARCH,
			},
		},
		Spec: v1.NodeSpec{ProviderID: cfg.ProviderID},
	}
	for k, v := range cfg.Labels {
		n.Labels[k] = v
	}
	if cfg.ControllerAttachDetach {
		n.Annotations = map[string]string{annotationControllerManagedAttach: "true"}
	}
	n.Spec.Taints = append(n.Spec.Taints, cfg.Taints...)
	if cfg.ExternalCloudProvider {
		n.Spec.Taints = append(n.Spec.Taints, v1.Taint{Key: taintExternalCloudProvider, Value: "true", Effect: v1.TaintEffectNoSchedule})
	}
	return n
}

// setStatus writes every status field the agent owns into n. Conditions of
// other types (NetworkUnavailable, set by network plugins) are kept.
func setStatus(cfg *Config, n *v1.Node, obs observation, now metav1.Time) {
	s := &n.Status
	s.Capacity = withExtended(capacity(obs.machine, cfg.MaxPods), s.Capacity)
	s.Allocatable = allocatable(s.Capacity, cfg.KubeReserved, cfg.SystemReserved, cfg.EvictionHard)
	s.Addresses = obs.addresses
	s.DaemonEndpoints.KubeletEndpoint.Port = cfg.KubeletPort

	s.NodeInfo.MachineID = obs.machine.MachineID
	s.NodeInfo.SystemUUID = obs.machine.SystemUUID
	s.NodeInfo.BootID = obs.machine.BootID
	s.NodeInfo.KernelVersion = obs.machine.KernelVersion
	s.NodeInfo.OSImage = obs.machine.OSImage
	s.NodeInfo.OperatingSystem = goruntime.GOOS
	s.NodeInfo.Architecture = goruntime.GOARCH
	s.NodeInfo.KubeletVersion = cfg.KubeletVersion
	inUserNS := obs.machine.InUserNamespace
	s.NodeInfo.RunningInUserNamespace = &inUserNS
	if obs.version != nil {
		// As the kubelet: the version is parsed, so containerd's "v2.4.2" reads "2.4.2".
		s.NodeInfo.ContainerRuntimeVersion = fmt.Sprintf("%s://%s", obs.version.RuntimeName, strings.TrimPrefix(obs.version.RuntimeVersion, "v"))
	}
	if obs.status != nil {
		s.RuntimeHandlers = runtimeHandlers(obs.status.RuntimeHandlers)
		if f := obs.status.Features; f != nil {
			s.Features = &v1.NodeFeatures{SupplementalGroupsPolicy: ptr.To(f.SupplementalGroupsPolicy)}
		}
	}
	if obs.images != nil {
		s.Images = nodeImages(obs.images, cfg.MaxImages)
	}
	s.VolumesInUse = obs.volumesInUse
	s.Conditions = conditions(s.Conditions, obs.notReady, obs.pressure, now)
}

// withExtended adds to the agent's own capacity the extended resources the Node already
// advertises (example.com/dongle, patched into the status by an administrator, as
// Kubernetes documents): the kubelet keeps them, and so they reach allocatable too.
func withExtended(own, current v1.ResourceList) v1.ResourceList {
	for name, q := range current {
		if _, ok := own[name]; !ok && extendedResource(name) {
			own[name] = q.DeepCopy()
		}
	}
	return own
}

// extendedResource says whether name is an extended resource: a qualified name outside the
// kubernetes.io domain (and not a quota's requests. prefix).
func extendedResource(name v1.ResourceName) bool {
	s := string(name)
	return strings.Contains(s, "/") && !strings.HasPrefix(s, "requests.") &&
		!strings.HasPrefix(s, "kubernetes.io/") && !strings.Contains(strings.SplitN(s, "/", 2)[0], ".kubernetes.io")
}

func runtimeHandlers(in []*runtimeapi.RuntimeHandler) []v1.NodeRuntimeHandler {
	var out []v1.NodeRuntimeHandler
	for _, h := range in {
		nh := v1.NodeRuntimeHandler{Name: h.Name}
		if f := h.Features; f != nil {
			nh.Features = &v1.NodeRuntimeHandlerFeatures{
				RecursiveReadOnlyMounts: ptr.To(f.RecursiveReadOnlyMounts),
				UserNamespaces:          ptr.To(f.UserNamespaces),
			}
		}
		out = append(out, nh)
	}
	return out
}

// nodeImages lists the largest images first, up to max (negative: all),
// each with at most maxNamesPerImage names, digests first.
func nodeImages(images []*runtimeapi.Image, max int32) []v1.ContainerImage {
	sorted := append([]*runtimeapi.Image(nil), images...)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].Size > sorted[j].Size })
	if max >= 0 && int(max) < len(sorted) {
		sorted = sorted[:max]
	}
	out := []v1.ContainerImage{}
	for _, img := range sorted {
		names := append(append([]string{}, img.RepoDigests...), img.RepoTags...)
		if len(names) > maxNamesPerImage {
			names = names[:maxNamesPerImage]
		}
		out = append(out, v1.ContainerImage{Names: names, SizeBytes: int64(img.Size)})
	}
	return out
}

// nodeAddresses lists the InternalIPs then the Hostname.
func nodeAddresses(ips []net.IP, hostname string) []v1.NodeAddress {
	var out []v1.NodeAddress
	for _, ip := range ips {
		out = append(out, v1.NodeAddress{Type: v1.NodeInternalIP, Address: ip.String()})
	}
	return append(out, v1.NodeAddress{Type: v1.NodeHostName, Address: hostname})
}

// statusChanged reports whether two statuses differ in anything but the
// conditions' heartbeat times, which change on every tick.
func statusChanged(a, b *v1.NodeStatus) bool {
	strip := func(s *v1.NodeStatus) *v1.NodeStatus {
		c := s.DeepCopy()
		for i := range c.Conditions {
			c.Conditions[i].LastHeartbeatTime = metav1.Time{}
		}
		return c
	}
	return !apiequality.Semantic.DeepEqual(strip(a), strip(b))
}
