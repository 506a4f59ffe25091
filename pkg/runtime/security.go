package runtime

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// SecurityOptions are the node-wide settings of container security.
type SecurityOptions struct {
	// SeccompDefault makes RuntimeDefault the profile of containers that
	// ask for none (the kubelet's seccompDefault); otherwise they run
	// Unconfined.
	SeccompDefault bool
	// SeccompProfileRoot is where Localhost profiles are found:
	// <root-dir>/seccomp, as for the kubelet.
	SeccompProfileRoot string
	// UserNamespace is the pod's own user namespace, set per pod: its
	// mappings for a pod with hostUsers: false, which is refused without
	// them; ignored for other pods, which run in the node's.
	UserNamespace *runtimeapi.UserNamespace
}

// ImageUser is the user an image's config runs as: a numeric UID, a
// name, or neither (root).
type ImageUser struct {
	UID  *int64
	Name string
}

// ImageUserOf reads the user from a CRI image; an image that names no
// user runs as root.
func ImageUserOf(img *runtimeapi.Image) ImageUser {
	if img != nil {
		if uid := img.GetUid(); uid != nil {
			v := uid.GetValue()
			return ImageUser{UID: &v}
		}
		if img.GetUsername() != "" {
			return ImageUser{Name: img.GetUsername()}
		}
	}
	root := int64(0)
	return ImageUser{UID: &root}
}

// errEmptyLocalhostSeccomp is the kubelet's error for a Localhost seccomp
// profile without a name: such a container must not run unconfined.
var errEmptyLocalhostSeccomp = errors.New("localhostProfile must be set if seccompProfile type is Localhost.") //nolint:staticcheck // the kubelet's words

// The paths the runtime masks and makes read-only in /proc and /sys
// unless the container asks for an unmasked /proc; the kubelet sends the
// same lists (Docker's defaults): the masked ones with each possible CPU's
// thermal_throttle directory this machine has (read once, from /sys).
var (
	defaultMaskedPaths   = sync.OnceValue(func() []string { return maskedPaths("/sys") })
	defaultReadonlyPaths = []string{"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"}
)

// maskedPaths is the masked list on the machine whose sysfs is at sys.
func maskedPaths(sys string) []string {
	out := []string{
		"/proc/asound", "/proc/acpi", "/proc/interrupts", "/proc/kcore", "/proc/keys",
		"/proc/latency_stats", "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug",
		"/proc/scsi", "/sys/firmware", "/sys/devices/virtual/powercap",
	}
	possible, err := os.ReadFile(filepath.Join(sys, "devices/system/cpu/possible"))
	if err != nil {
		return out
	}
	for _, cpu := range cpuList(strings.TrimSpace(string(possible))) {
		rel := fmt.Sprintf("devices/system/cpu/cpu%d/thermal_throttle", cpu)
		if _, err := os.Stat(filepath.Join(sys, rel)); err == nil {
			out = append(out, "/sys/"+rel)
		}
	}
	return out
}

// cpuList reads a kernel CPU list ("0-3,8,10-11"); what does not parse is
// left out.
func cpuList(s string) []int {
	var out []int
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		first, err := strconv.Atoi(lo)
		if err != nil {
			continue
		}
		last := first
		if isRange {
			if last, err = strconv.Atoi(hi); err != nil || last < first {
				continue
			}
		}
		for cpu := first; cpu <= last; cpu++ {
			out = append(out, cpu)
		}
	}
	return out
}

// effectiveSecurity merges the pod's security context into the
// container's: the container's own settings win.
func effectiveSecurity(pod *v1.Pod, c *v1.Container) v1.SecurityContext {
	var sc v1.SecurityContext
	if c.SecurityContext != nil {
		sc = *c.SecurityContext
	}
	psc := pod.Spec.SecurityContext
	if psc == nil {
		return sc
	}
	if sc.RunAsUser == nil {
		sc.RunAsUser = psc.RunAsUser
	}
	if sc.RunAsGroup == nil {
		sc.RunAsGroup = psc.RunAsGroup
	}
	if sc.RunAsNonRoot == nil {
		sc.RunAsNonRoot = psc.RunAsNonRoot
	}
	if sc.SELinuxOptions == nil {
		sc.SELinuxOptions = psc.SELinuxOptions
	}
	if sc.SeccompProfile == nil {
		sc.SeccompProfile = psc.SeccompProfile
	}
	if sc.AppArmorProfile == nil {
		sc.AppArmorProfile = psc.AppArmorProfile
	}
	return sc
}

// VerifyRunAsNonRoot refuses a container that must not run as root but
// would: by its runAsUser, or by its image's user when it has none. A
// named image user cannot be checked and is refused too.
func VerifyRunAsNonRoot(pod *v1.Pod, c *v1.Container, img ImageUser) error {
	sc := effectiveSecurity(pod, c)
	if sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
		return nil
	}
	desc := fmt.Sprintf("%s_%s(%s)", pod.Name, pod.Namespace, pod.UID)
	if sc.RunAsUser != nil {
		if *sc.RunAsUser == 0 {
			return fmt.Errorf("container's runAsUser breaks non-root policy (pod: %q, container: %s)", desc, c.Name)
		}
		return nil
	}
	switch {
	case img.UID != nil && *img.UID == 0:
		return fmt.Errorf("container has runAsNonRoot and image will run as root (pod: %q, container: %s)", desc, c.Name)
	case img.UID == nil && img.Name != "":
		return fmt.Errorf("container has runAsNonRoot and image has non-numeric user (%s), cannot verify user is non-root (pod: %q, container: %s)", img.Name, desc, c.Name)
	}
	return nil
}

// ContainerSecurity is the container's Linux security context as the
// runtime takes it. The image's user stands in for an unset runAsUser, so
// that runAsGroup applies and the identity is fixed at creation. An error
// is a setting that cannot be honoured safely (an empty Localhost
// seccomp profile).
func ContainerSecurity(pod *v1.Pod, c *v1.Container, opts SecurityOptions, img ImageUser) (*runtimeapi.LinuxContainerSecurityContext, error) {
	sc := effectiveSecurity(pod, c)
	userns, err := userNamespace(pod, opts.UserNamespace)
	if err != nil {
		return nil, err
	}
	out := &runtimeapi.LinuxContainerSecurityContext{
		NamespaceOptions: namespaceOptions(pod),
		Privileged:       isTrue(sc.Privileged),
		ReadonlyRootfs:   isTrue(sc.ReadOnlyRootFilesystem),
		SelinuxOptions:   seLinuxOptions(sc.SELinuxOptions),
		// Only an explicit allowPrivilegeEscalation: false sets
		// no_new_privs; unset leaves escalation allowed, as the kubelet does.
		NoNewPrivs:    sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation,
		MaskedPaths:   defaultMaskedPaths(),
		ReadonlyPaths: defaultReadonlyPaths,
	}
	out.NamespaceOptions.UsernsOptions = userns
	if sc.ProcMount != nil && *sc.ProcMount == v1.UnmaskedProcMount {
		out.MaskedPaths, out.ReadonlyPaths = []string{}, []string{}
	}
	if caps := sc.Capabilities; caps != nil {
		out.Capabilities = &runtimeapi.Capability{}
		for _, cp := range caps.Add {
			out.Capabilities.AddCapabilities = append(out.Capabilities.AddCapabilities, string(cp))
		}
		for _, cp := range caps.Drop {
			out.Capabilities.DropCapabilities = append(out.Capabilities.DropCapabilities, string(cp))
		}
	}
	switch {
	case sc.RunAsUser != nil:
		out.RunAsUser = &runtimeapi.Int64Value{Value: *sc.RunAsUser}
	case img.UID != nil:
		out.RunAsUser = &runtimeapi.Int64Value{Value: *img.UID}
	default:
		out.RunAsUsername = img.Name
	}
	if sc.RunAsGroup != nil {
		out.RunAsGroup = &runtimeapi.Int64Value{Value: *sc.RunAsGroup}
	}
	groups, policy, err := podGroups(pod)
	if err != nil {
		return nil, err
	}
	out.SupplementalGroups, out.SupplementalGroupsPolicy = groups, policy
	if out.Seccomp, err = seccompProfile(sc.SeccompProfile, opts); err != nil {
		return nil, err
	}
	if out.Apparmor, out.ApparmorProfile, err = appArmorProfile(sc.AppArmorProfile); err != nil {
		return nil, err
	}
	return out, nil
}

// podGroups are the supplemental groups of every process of the pod:
// fsGroup first, then supplementalGroups, with the pod's policy.
func podGroups(pod *v1.Pod) ([]int64, runtimeapi.SupplementalGroupsPolicy, error) {
	psc := pod.Spec.SecurityContext
	if psc == nil {
		return nil, runtimeapi.SupplementalGroupsPolicy_Merge, nil
	}
	var groups []int64
	if psc.FSGroup != nil {
		groups = append(groups, *psc.FSGroup)
	}
	groups = append(groups, psc.SupplementalGroups...)
	policy := runtimeapi.SupplementalGroupsPolicy_Merge
	if p := psc.SupplementalGroupsPolicy; p != nil {
		switch *p {
		case v1.SupplementalGroupsPolicyMerge:
		case v1.SupplementalGroupsPolicyStrict:
			policy = runtimeapi.SupplementalGroupsPolicy_Strict
		default:
			return nil, 0, fmt.Errorf("unsupported supplementalGroupsPolicy: %s", *p)
		}
	}
	return groups, policy, nil
}

// seccompProfile translates a seccomp profile; none means the node's
// default.
func seccompProfile(p *v1.SeccompProfile, opts SecurityOptions) (*runtimeapi.SecurityProfile, error) {
	if p == nil {
		if opts.SeccompDefault {
			return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault}, nil
		}
		return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Unconfined}, nil
	}
	switch p.Type {
	case v1.SeccompProfileTypeRuntimeDefault:
		return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault}, nil
	case v1.SeccompProfileTypeLocalhost:
		if p.LocalhostProfile == nil || *p.LocalhostProfile == "" {
			return nil, errEmptyLocalhostSeccomp
		}
		return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost,
			LocalhostRef: filepath.Join(opts.SeccompProfileRoot, *p.LocalhostProfile)}, nil
	}
	return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Unconfined}, nil
}

// appArmorProfile translates an AppArmor profile, with the deprecated
// string form older runtimes read; none leaves the runtime's default.
func appArmorProfile(p *v1.AppArmorProfile) (*runtimeapi.SecurityProfile, string, error) {
	if p == nil {
		return nil, "", nil
	}
	switch p.Type {
	case v1.AppArmorProfileTypeRuntimeDefault:
		return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault}, v1.DeprecatedAppArmorBetaProfileRuntimeDefault, nil
	case v1.AppArmorProfileTypeUnconfined:
		return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Unconfined}, v1.DeprecatedAppArmorBetaProfileNameUnconfined, nil
	case v1.AppArmorProfileTypeLocalhost:
		if p.LocalhostProfile == nil || *p.LocalhostProfile == "" {
			return nil, "", errors.New("missing localhost apparmor profile name")
		}
		return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: *p.LocalhostProfile},
			v1.DeprecatedAppArmorBetaProfileNamePrefix + *p.LocalhostProfile, nil
	}
	return nil, "", fmt.Errorf("unknown apparmor profile type: %q", p.Type)
}

func seLinuxOptions(o *v1.SELinuxOptions) *runtimeapi.SELinuxOption {
	if o == nil {
		return nil
	}
	return &runtimeapi.SELinuxOption{User: o.User, Role: o.Role, Type: o.Type, Level: o.Level}
}

// sandboxSecurity is the pod-level security context of the sandbox: the
// pod's identity and groups, its sysctls, and privileged when any of its
// containers is (the runtime refuses a privileged container in an
// unprivileged sandbox). The sandbox runs under the runtime's default
// seccomp profile whatever the pod asks, as the kubelet's does: the pause
// process needs no more, and the pod's own profile, however strict, is
// its containers' (where a bad one fails the container).
func sandboxSecurity(pod *v1.Pod, opts SecurityOptions) (*runtimeapi.LinuxSandboxSecurityContext, error) {
	userns, err := userNamespace(pod, opts.UserNamespace)
	if err != nil {
		return nil, err
	}
	out := &runtimeapi.LinuxSandboxSecurityContext{
		NamespaceOptions: namespaceOptions(pod),
		Privileged:       hasPrivileged(pod),
	}
	out.NamespaceOptions.UsernsOptions = userns
	var podAppArmor *v1.AppArmorProfile
	if psc := pod.Spec.SecurityContext; psc != nil {
		if psc.RunAsUser != nil {
			out.RunAsUser = &runtimeapi.Int64Value{Value: *psc.RunAsUser}
		}
		if psc.RunAsGroup != nil {
			out.RunAsGroup = &runtimeapi.Int64Value{Value: *psc.RunAsGroup}
		}
		out.SelinuxOptions = seLinuxOptions(psc.SELinuxOptions)
		podAppArmor = psc.AppArmorProfile
	}
	if out.SupplementalGroups, out.SupplementalGroupsPolicy, err = podGroups(pod); err != nil {
		return nil, err
	}
	out.Seccomp = &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault}
	if out.Apparmor, _, err = appArmorProfile(podAppArmor); err != nil {
		return nil, err
	}
	return out, nil
}

// podSysctls are the pod's sysctls, set in its sandbox's namespaces.
func podSysctls(pod *v1.Pod) map[string]string {
	psc := pod.Spec.SecurityContext
	if psc == nil || len(psc.Sysctls) == 0 {
		return nil
	}
	out := make(map[string]string, len(psc.Sysctls))
	for _, s := range psc.Sysctls {
		out[s.Name] = s.Value
	}
	return out
}

func hasPrivileged(pod *v1.Pod) bool {
	for _, list := range [][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, c := range list {
			if c.SecurityContext != nil && isTrue(c.SecurityContext.Privileged) {
				return true
			}
		}
	}
	return false
}
