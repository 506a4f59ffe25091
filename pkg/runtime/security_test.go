package runtime

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/ptr"
)

func securityPod() *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u1"},
		Spec:       v1.PodSpec{Containers: []v1.Container{{Name: "c"}}},
	}
}

func podSC(p *v1.Pod) *v1.PodSecurityContext {
	if p.Spec.SecurityContext == nil {
		p.Spec.SecurityContext = &v1.PodSecurityContext{}
	}
	return p.Spec.SecurityContext
}

func ctrSC(p *v1.Pod) *v1.SecurityContext {
	c := &p.Spec.Containers[0]
	if c.SecurityContext == nil {
		c.SecurityContext = &v1.SecurityContext{}
	}
	return c.SecurityContext
}

func TestVerifyRunAsNonRoot(t *testing.T) {
	root, user := ImageUserOf(nil), ImageUser{UID: ptr.To[int64](1000)}
	named := ImageUser{Name: "nobody"}
	for _, tc := range []struct {
		name    string
		mutate  func(*v1.Pod)
		img     ImageUser
		wantErr string
	}{
		{name: "not asked", img: root},
		{name: "false", mutate: func(p *v1.Pod) { podSC(p).RunAsNonRoot = ptr.To(false) }, img: root},
		{name: "root image", mutate: func(p *v1.Pod) { podSC(p).RunAsNonRoot = ptr.To(true) }, img: root,
			wantErr: `container has runAsNonRoot and image will run as root (pod: "p_ns(u1)", container: c)`},
		{name: "numeric image user", mutate: func(p *v1.Pod) { ctrSC(p).RunAsNonRoot = ptr.To(true) }, img: user},
		{name: "named image user", mutate: func(p *v1.Pod) { ctrSC(p).RunAsNonRoot = ptr.To(true) }, img: named,
			wantErr: `container has runAsNonRoot and image has non-numeric user (nobody), cannot verify user is non-root (pod: "p_ns(u1)", container: c)`},
		{name: "runAsUser overrides image", mutate: func(p *v1.Pod) {
			podSC(p).RunAsNonRoot = ptr.To(true)
			podSC(p).RunAsUser = ptr.To[int64](5)
		}, img: root},
		{name: "runAsUser 0", mutate: func(p *v1.Pod) {
			podSC(p).RunAsNonRoot = ptr.To(true)
			ctrSC(p).RunAsUser = ptr.To[int64](0)
		}, img: user, wantErr: `container's runAsUser breaks non-root policy (pod: "p_ns(u1)", container: c)`},
		{name: "container false overrides pod true", mutate: func(p *v1.Pod) {
			podSC(p).RunAsNonRoot = ptr.To(true)
			ctrSC(p).RunAsNonRoot = ptr.To(false)
		}, img: root},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := securityPod()
			if tc.mutate != nil {
				tc.mutate(p)
			}
			err := VerifyRunAsNonRoot(p, &p.Spec.Containers[0], tc.img)
			got := ""
			if err != nil {
				got = err.Error()
			}
			if got != tc.wantErr {
				t.Errorf("err = %q, want %q", got, tc.wantErr)
			}
		})
	}
}

func TestContainerSecurity(t *testing.T) {
	opts := SecurityOptions{SeccompProfileRoot: "/var/lib/nodeagent/seccomp"}
	for _, tc := range []struct {
		name    string
		mutate  func(*v1.Pod)
		opts    *SecurityOptions
		img     ImageUser
		check   func(*testing.T, *runtimeapi.LinuxContainerSecurityContext)
		wantErr string
	}{
		{
			name: "defaults",
			img:  ImageUserOf(nil),
			check: func(t *testing.T, sc *runtimeapi.LinuxContainerSecurityContext) {
				if sc.RunAsUser.GetValue() != 0 || sc.RunAsUser == nil {
					t.Errorf("runAsUser %v, want the image's root", sc.RunAsUser)
				}
				if sc.NoNewPrivs || sc.Privileged || sc.ReadonlyRootfs {
					t.Errorf("unexpected privileges or restrictions: %v", sc)
				}
				if sc.Seccomp.GetProfileType() != runtimeapi.SecurityProfile_Unconfined {
					t.Errorf("seccomp %v, want Unconfined", sc.Seccomp)
				}
				if len(sc.MaskedPaths) != len(defaultMaskedPaths()) || len(sc.ReadonlyPaths) != len(defaultReadonlyPaths) {
					t.Errorf("masked %v readonly %v, want the defaults", sc.MaskedPaths, sc.ReadonlyPaths)
				}
				if sc.Apparmor != nil {
					t.Errorf("apparmor %v, want the runtime's default", sc.Apparmor)
				}
			},
		},
		{
			name: "seccompDefault",
			opts: &SecurityOptions{SeccompDefault: true},
			check: func(t *testing.T, sc *runtimeapi.LinuxContainerSecurityContext) {
				if sc.Seccomp.GetProfileType() != runtimeapi.SecurityProfile_RuntimeDefault {
					t.Errorf("seccomp %v, want RuntimeDefault", sc.Seccomp)
				}
			},
		},
		{
			name: "users, groups, fsGroup and policy",
			mutate: func(p *v1.Pod) {
				psc := podSC(p)
				psc.RunAsUser, psc.RunAsGroup, psc.FSGroup = ptr.To[int64](1000), ptr.To[int64](3000), ptr.To[int64](2000)
				psc.SupplementalGroups = []int64{4000, 5000}
				psc.SupplementalGroupsPolicy = ptr.To(v1.SupplementalGroupsPolicyStrict)
				ctrSC(p).RunAsUser = ptr.To[int64](1001)
			},
			img: ImageUser{Name: "nobody"},
			check: func(t *testing.T, sc *runtimeapi.LinuxContainerSecurityContext) {
				if sc.RunAsUser.GetValue() != 1001 || sc.RunAsGroup.GetValue() != 3000 || sc.RunAsUsername != "" {
					t.Errorf("user %v group %v name %q, want 1001/3000", sc.RunAsUser, sc.RunAsGroup, sc.RunAsUsername)
				}
				if got := sc.SupplementalGroups; len(got) != 3 || got[0] != 2000 || got[1] != 4000 || got[2] != 5000 {
					t.Errorf("groups %v, want [2000 4000 5000]", got)
				}
				if sc.SupplementalGroupsPolicy != runtimeapi.SupplementalGroupsPolicy_Strict {
					t.Errorf("policy %v, want Strict", sc.SupplementalGroupsPolicy)
				}
			},
		},
		{
			name: "named image user",
			img:  ImageUser{Name: "nobody"},
			check: func(t *testing.T, sc *runtimeapi.LinuxContainerSecurityContext) {
				if sc.RunAsUser != nil || sc.RunAsUsername != "nobody" {
					t.Errorf("user %v name %q, want name nobody", sc.RunAsUser, sc.RunAsUsername)
				}
			},
		},
		{
			name: "privileges and capabilities",
			mutate: func(p *v1.Pod) {
				sc := ctrSC(p)
				sc.Privileged, sc.ReadOnlyRootFilesystem, sc.AllowPrivilegeEscalation = ptr.To(true), ptr.To(true), ptr.To(false)
				sc.Capabilities = &v1.Capabilities{Add: []v1.Capability{"NET_ADMIN"}, Drop: []v1.Capability{"ALL"}}
				sc.ProcMount = ptr.To(v1.UnmaskedProcMount)
			},
			check: func(t *testing.T, sc *runtimeapi.LinuxContainerSecurityContext) {
				if !sc.Privileged || !sc.ReadonlyRootfs || !sc.NoNewPrivs {
					t.Errorf("privileged %v readonly %v noNewPrivs %v, want all", sc.Privileged, sc.ReadonlyRootfs, sc.NoNewPrivs)
				}
				if strings.Join(sc.Capabilities.GetAddCapabilities(), ",") != "NET_ADMIN" || strings.Join(sc.Capabilities.GetDropCapabilities(), ",") != "ALL" {
					t.Errorf("capabilities %v", sc.Capabilities)
				}
				if len(sc.MaskedPaths) != 0 || len(sc.ReadonlyPaths) != 0 {
					t.Errorf("an unmasked /proc has masked %v readonly %v", sc.MaskedPaths, sc.ReadonlyPaths)
				}
			},
		},
		{
			name:   "allowPrivilegeEscalation true",
			mutate: func(p *v1.Pod) { ctrSC(p).AllowPrivilegeEscalation = ptr.To(true) },
			check: func(t *testing.T, sc *runtimeapi.LinuxContainerSecurityContext) {
				if sc.NoNewPrivs {
					t.Error("noNewPrivs set")
				}
			},
		},
		{
			name: "container seccomp overrides pod's",
			mutate: func(p *v1.Pod) {
				podSC(p).SeccompProfile = &v1.SeccompProfile{Type: v1.SeccompProfileTypeRuntimeDefault}
				ctrSC(p).SeccompProfile = &v1.SeccompProfile{Type: v1.SeccompProfileTypeLocalhost, LocalhostProfile: ptr.To("profiles/audit.json")}
			},
			check: func(t *testing.T, sc *runtimeapi.LinuxContainerSecurityContext) {
				if sc.Seccomp.GetProfileType() != runtimeapi.SecurityProfile_Localhost || sc.Seccomp.GetLocalhostRef() != "/var/lib/nodeagent/seccomp/profiles/audit.json" {
					t.Errorf("seccomp %v", sc.Seccomp)
				}
			},
		},
		{
			name: "pod seccomp",
			mutate: func(p *v1.Pod) {
				podSC(p).SeccompProfile = &v1.SeccompProfile{Type: v1.SeccompProfileTypeRuntimeDefault}
			},
			check: func(t *testing.T, sc *runtimeapi.LinuxContainerSecurityContext) {
				if sc.Seccomp.GetProfileType() != runtimeapi.SecurityProfile_RuntimeDefault {
					t.Errorf("seccomp %v", sc.Seccomp)
				}
			},
		},
		{
			name:    "empty localhost seccomp",
			mutate:  func(p *v1.Pod) { ctrSC(p).SeccompProfile = &v1.SeccompProfile{Type: v1.SeccompProfileTypeLocalhost} },
			wantErr: "localhostProfile must be set if seccompProfile type is Localhost.",
		},
		{
			name: "apparmor",
			mutate: func(p *v1.Pod) {
				podSC(p).AppArmorProfile = &v1.AppArmorProfile{Type: v1.AppArmorProfileTypeLocalhost, LocalhostProfile: ptr.To("k8s-deny")}
			},
			check: func(t *testing.T, sc *runtimeapi.LinuxContainerSecurityContext) {
				if sc.Apparmor.GetLocalhostRef() != "k8s-deny" || sc.ApparmorProfile != "localhost/k8s-deny" {
					t.Errorf("apparmor %v %q", sc.Apparmor, sc.ApparmorProfile)
				}
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := securityPod()
			if tc.mutate != nil {
				tc.mutate(p)
			}
			o := opts
			if tc.opts != nil {
				o = *tc.opts
			}
			sc, err := ContainerSecurity(p, &p.Spec.Containers[0], o, tc.img)
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, sc)
		})
	}
}

func TestSandboxSecurity(t *testing.T) {
	p := securityPod()
	psc := podSC(p)
	psc.Sysctls = []v1.Sysctl{{Name: "net.ipv4.ip_unprivileged_port_start", Value: "0"}}
	psc.FSGroup, psc.RunAsUser = ptr.To[int64](2000), ptr.To[int64](1000)
	psc.SeccompProfile = &v1.SeccompProfile{Type: v1.SeccompProfileTypeRuntimeDefault}
	p.Spec.InitContainers = []v1.Container{{Name: "i", SecurityContext: &v1.SecurityContext{Privileged: ptr.To(true)}}}
	cfg, _, err := SandboxConfig(p, 0, PodOptions{})
	if err != nil {
		t.Fatal(err)
	}
	lsc := cfg.Linux.SecurityContext
	if !lsc.Privileged {
		t.Error("a pod with a privileged container needs a privileged sandbox")
	}
	if lsc.RunAsUser.GetValue() != 1000 || len(lsc.SupplementalGroups) != 1 || lsc.SupplementalGroups[0] != 2000 {
		t.Errorf("user %v groups %v", lsc.RunAsUser, lsc.SupplementalGroups)
	}
	if lsc.Seccomp.GetProfileType() != runtimeapi.SecurityProfile_RuntimeDefault {
		t.Errorf("seccomp %v", lsc.Seccomp)
	}
	if cfg.Linux.Sysctls["net.ipv4.ip_unprivileged_port_start"] != "0" {
		t.Errorf("sysctls %v", cfg.Linux.Sysctls)
	}
	// The sandbox runs the runtime's default profile whatever the pod asks, as the
	// kubelet's: an unconfined pod's too, and a pod whose own profile is bad (its
	// containers fail on it, not the sandbox).
	for _, prof := range []*v1.SeccompProfile{
		nil,
		{Type: v1.SeccompProfileTypeUnconfined},
		{Type: v1.SeccompProfileTypeLocalhost, LocalhostProfile: ptr.To("")},
	} {
		psc.SeccompProfile = prof
		cfg, _, err := SandboxConfig(p, 0, PodOptions{})
		if err != nil {
			t.Fatalf("pod profile %v: %v", prof, err)
		}
		if got := cfg.Linux.SecurityContext.Seccomp; got.GetProfileType() != runtimeapi.SecurityProfile_RuntimeDefault {
			t.Errorf("pod profile %v: the sandbox's is %v, want RuntimeDefault", prof, got)
		}
	}
	if _, err := ContainerSecurity(p, &p.Spec.Containers[0], SecurityOptions{}, ImageUser{}); err == nil {
		t.Error("an empty pod-level Localhost profile must fail its container")
	}
}

func TestMaskedPaths(t *testing.T) {
	sys := t.TempDir()
	if err := os.MkdirAll(filepath.Join(sys, "devices/system/cpu/cpu1/thermal_throttle"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(sys, "devices/system/cpu/possible"), []byte("0-1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	got := maskedPaths(sys)
	if !slices.Contains(got, "/proc/interrupts") || !slices.Contains(got, "/sys/devices/virtual/powercap") {
		t.Errorf("masked %v: not the kubelet's list", got)
	}
	// Only the CPUs whose directory is there: cpu0 has none here.
	if got[len(got)-1] != "/sys/devices/system/cpu/cpu1/thermal_throttle" || slices.Contains(got, "/sys/devices/system/cpu/cpu0/thermal_throttle") {
		t.Errorf("masked %v: want cpu1's thermal_throttle alone", got)
	}
	if plain := maskedPaths(filepath.Join(sys, "missing")); len(plain) != len(got)-1 {
		t.Errorf("without a sysfs: %v", plain)
	}
}

func TestCPUList(t *testing.T) {
	for in, want := range map[string][]int{
		"0":           {0},
		"0-3":         {0, 1, 2, 3},
		"0-1,4,6-7":   {0, 1, 4, 6, 7},
		"":            nil,
		"x,2,5-3,3-x": {2},
	} {
		if got := cpuList(in); !slices.Equal(got, want) {
			t.Errorf("cpuList(%q) = %v, want %v", in, got, want)
		}
	}
}

// TestUserNamespaceOptions: a pod with hostUsers: false runs its sandbox and each of its
// containers in its own user namespace, the mappings it was given; without them it is
// refused, never run in the node's. Any other pod names the node's explicitly, as the
// kubelet does.
func TestUserNamespaceOptions(t *testing.T) {
	ids := func(host uint32) []*runtimeapi.IDMapping {
		return []*runtimeapi.IDMapping{{HostId: host, ContainerId: 0, Length: 65536}}
	}
	own := &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_POD, Uids: ids(131072), Gids: ids(131072)}
	node := &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_NODE}
	for _, tc := range []struct {
		name      string
		hostUsers *bool
		given     *runtimeapi.UserNamespace
		want      *runtimeapi.UserNamespace
		wantErr   bool
	}{
		{name: "hostUsers unset", want: node},
		{name: "hostUsers true", hostUsers: ptr.To(true), want: node},
		{name: "hostUsers true, mappings ignored", hostUsers: ptr.To(true), given: own, want: node},
		{name: "hostUsers false", hostUsers: ptr.To(false), given: own, want: own},
		{name: "hostUsers false without mappings", hostUsers: ptr.To(false), wantErr: true},
		{name: "hostUsers false given the node's", hostUsers: ptr.To(false), given: node, wantErr: true},
		{name: "hostUsers false given no gids", hostUsers: ptr.To(false), wantErr: true,
			given: &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_POD, Uids: ids(131072)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := securityPod()
			pod.Spec.HostUsers = tc.hostUsers
			opts := PodOptions{Security: SecurityOptions{UserNamespace: tc.given}}
			sb, _, sbErr := SandboxConfig(pod, 0, opts)
			sec, ctrErr := ContainerSecurity(pod, &pod.Spec.Containers[0], opts.Security, ImageUser{})
			if tc.wantErr {
				for what, err := range map[string]error{"sandbox": sbErr, "container": ctrErr} {
					if err == nil || !strings.Contains(err.Error(), "can't set `spec.hostUsers: false`") {
						t.Errorf("%s: err %v, want the pod refused", what, err)
					}
				}
				return
			}
			if sbErr != nil || ctrErr != nil {
				t.Fatalf("sandbox: %v, container: %v", sbErr, ctrErr)
			}
			for what, got := range map[string]*runtimeapi.UserNamespace{
				"sandbox":   sb.GetLinux().GetSecurityContext().GetNamespaceOptions().GetUsernsOptions(),
				"container": sec.GetNamespaceOptions().GetUsernsOptions(),
			} {
				if got.String() != tc.want.String() {
					t.Errorf("%s user namespace %v, want %v", what, got, tc.want)
				}
			}
		})
	}
}

// TestContainerConfigWithoutSecurity: a container made without ContainerSecurity never
// falls back to the node's user namespace for a pod with hostUsers: false.
func TestContainerConfigWithoutSecurity(t *testing.T) {
	for _, tc := range []struct {
		hostUsers *bool
		want      runtimeapi.NamespaceMode
	}{
		{hostUsers: nil, want: runtimeapi.NamespaceMode_NODE},
		{hostUsers: ptr.To(false), want: runtimeapi.NamespaceMode_POD},
	} {
		pod := securityPod()
		pod.Spec.HostUsers = tc.hostUsers
		got := ContainerConfig(pod, &pod.Spec.Containers[0], ContainerInputs{}).GetLinux().GetSecurityContext().GetNamespaceOptions().GetUsernsOptions()
		if got.GetMode() != tc.want || len(got.GetUids()) != 0 {
			t.Errorf("hostUsers %v: %v, want mode %v without mappings", tc.hostUsers, got, tc.want)
		}
	}
}
