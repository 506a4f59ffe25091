//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/ptr"

	"github.com/nodeagent/nodeagent/test/e2e/framework"
	"github.com/nodeagent/nodeagent/test/harness"
)

// resolvConf is what a resolver file says: its nameserver, search and options lines.
type resolvConf struct{ servers, searches, options []string }

func parseResolv(text string) resolvConf {
	var r resolvConf
	for _, l := range strings.Split(text, "\n") {
		f := strings.Fields(l)
		if len(f) < 2 || strings.HasPrefix(f[0], "#") {
			continue
		}
		switch f[0] {
		case "nameserver":
			r.servers = append(r.servers, f[1])
		case "search":
			r.searches = f[1:]
		case "options":
			r.options = append(r.options, f[1:]...)
		}
	}
	return r
}

func (r resolvConf) String() string {
	return fmt.Sprintf("nameservers %v searches %v options %v", r.servers, r.searches, r.options)
}

// TestPodResolvConf: every dnsPolicy, with and without dnsConfig, gives the
// process the /etc/resolv.conf the kubelet would, cut to the resolver's
// limits with the kubelet's warning.
func TestPodResolvConf(t *testing.T) {
	t.Parallel()
	hostData, err := os.ReadFile("/etc/resolv.conf")
	if err != nil {
		t.Fatal(err)
	}
	host := parseResolv(string(hostData))
	clusterSearch := []string{podNS + ".svc." + harness.ClusterDomain, "svc." + harness.ClusterDomain, harness.ClusterDomain}
	withHost := func(s []string) []string {
		out := append([]string(nil), s...)
		for _, h := range host.searches {
			if !strings.Contains(strings.Join(out, " ")+" ", h+" ") {
				out = append(out, h)
			}
		}
		return out
	}
	two := "2"
	for _, tc := range []struct {
		name    string
		mut     func(*corev1.PodSpec)
		want    resolvConf
		warning string // a DNSConfigForming event that must be seen
	}{
		{name: "ClusterFirst", want: resolvConf{servers: []string{harness.ClusterDNS}, searches: withHost(clusterSearch), options: []string{"ndots:5"}}},
		{name: "Default", mut: func(s *corev1.PodSpec) { s.DNSPolicy = corev1.DNSDefault }, want: host},
		{name: "ClusterFirst on the host network is Default", mut: func(s *corev1.PodSpec) { s.HostNetwork = true }, want: host},
		{name: "ClusterFirstWithHostNet", mut: func(s *corev1.PodSpec) { s.HostNetwork = true; s.DNSPolicy = corev1.DNSClusterFirstWithHostNet },
			want: resolvConf{servers: []string{harness.ClusterDNS}, searches: withHost(clusterSearch), options: []string{"ndots:5"}}},
		{name: "None with dnsConfig", mut: func(s *corev1.PodSpec) {
			s.DNSPolicy = corev1.DNSNone
			s.DNSConfig = &corev1.PodDNSConfig{Nameservers: []string{"10.254.254.53"}, Searches: []string{"a.example", "b.example"},
				Options: []corev1.PodDNSConfigOption{{Name: "ndots", Value: &two}, {Name: "edns0"}}}
		}, want: resolvConf{servers: []string{"10.254.254.53"}, searches: []string{"a.example", "b.example"}, options: []string{"ndots:2", "edns0"}}},
		{name: "ClusterFirst with dnsConfig over the nameserver limit", mut: func(s *corev1.PodSpec) {
			s.DNSConfig = &corev1.PodDNSConfig{Nameservers: []string{"10.254.254.53", "10.254.254.54", "10.254.254.55"},
				Options: []corev1.PodDNSConfigOption{{Name: "ndots", Value: &two}}}
		}, want: resolvConf{servers: []string{harness.ClusterDNS, "10.254.254.53", "10.254.254.54"}, searches: withHost(clusterSearch), options: []string{"ndots:2"}},
			warning: "Nameserver limits were exceeded, some nameservers have been omitted, the applied nameserver line is: " + harness.ClusterDNS + " 10.254.254.53 10.254.254.54"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pod := reportPod(podNS, "dns", "cat /etc/resolv.conf > /dev/termination-log")
			if tc.mut != nil {
				tc.mut(&pod.Spec)
			}
			pod = createPod(t, pod)
			term := terminated(t, pod)
			got := parseResolv(term.Message)
			if got.String() != tc.want.String() {
				t.Errorf("/etc/resolv.conf:\n%s\ngot  %s\nwant %s", term.Message, got, tc.want)
			}
			if tc.warning != "" {
				framework.Eventually(t, 30*time.Second, func() error {
					if ev := podEvents(t, pod); !hasEvent(ev, "DNSConfigForming", tc.warning) {
						return fmt.Errorf("no DNSConfigForming event %q:\n%s", tc.warning, eventSummary(ev))
					}
					return nil
				})
			}
		})
	}
}

// TestLocalhostSeccompProfile: a Localhost profile is read from the node's
// seccomp directory; an empty profile file is an error on the container,
// never an unconfined process, and the container starts under the profile
// once the file holds one.
func TestLocalhostSeccompProfile(t *testing.T) {
	t.Parallel()
	requireNodeagent(t)
	// Like the kubelet, the agent reads profiles from <root-dir>/seccomp, which the admin makes.
	root := filepath.Join(agentRootDir(t), "seccomp")
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp(root, "e2e-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	profile := filepath.Join(dir, "deny-mkdir.json")
	if err := os.WriteFile(profile, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	pod := reportPod(podNS, "seccomp-local",
		`{ grep '^Seccomp:' /proc/self/status; mkdir /tmp/made && echo mkdir-allowed || echo mkdir-refused; } > /dev/termination-log`)
	rel, _ := filepath.Rel(root, profile)
	// On the container (the sandbox runs the runtime's default profile whatever the pod
	// asks, as the kubelet's).
	pod.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{SeccompProfile: &corev1.SeccompProfile{
		Type: corev1.SeccompProfileTypeLocalhost, LocalhostProfile: ptr.To(rel)}}
	pod = createPod(t, pod)
	waitPod(t, pod, time.Minute, func(p *corev1.Pod) error {
		if len(p.Status.ContainerStatuses) == 0 {
			return fmt.Errorf("no container status")
		}
		w := p.Status.ContainerStatuses[0].State.Waiting
		if w == nil || w.Reason != "CreateContainerError" || !strings.Contains(w.Message, "seccomp") {
			return fmt.Errorf("containers %s, want CreateContainerError about the seccomp profile", describeStatuses(p.Status.ContainerStatuses))
		}
		return nil
	})
	deny := `{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["mkdir","mkdirat"],"action":"SCMP_ACT_ERRNO"}]}`
	if err := os.WriteFile(profile, []byte(deny), 0o644); err != nil {
		t.Fatal(err)
	}
	term := terminated(t, pod)
	if want := "Seccomp:\t2\nmkdir-refused\n"; term.Message != want {
		t.Errorf("the process saw %q, want %q", term.Message, want)
	}
}

// TestStdinAndTTY: stdin keeps a container's standard input open, tty
// gives it a terminal, as the spec asks.
func TestStdinAndTTY(t *testing.T) {
	t.Parallel()
	t.Run("tty", func(t *testing.T) {
		t.Parallel()
		pod := reportPod(podNS, "tty", `if [ -t 1 ]; then r=tty; else r=no-tty; fi; echo $r > /dev/termination-log`)
		pod.Spec.Containers[0].TTY = true
		pod = createPod(t, pod)
		if term := terminated(t, pod); term.Message != "tty\n" {
			t.Errorf("with tty: %q", term.Message)
		}
	})
	t.Run("no tty", func(t *testing.T) {
		t.Parallel()
		pod := reportPod(podNS, "notty", `if [ -t 1 ]; then r=tty; else r=no-tty; fi; echo $r > /dev/termination-log`)
		pod = createPod(t, pod)
		if term := terminated(t, pod); term.Message != "no-tty\n" {
			t.Errorf("without tty: %q", term.Message)
		}
	})
	t.Run("stdin stays open", func(t *testing.T) {
		t.Parallel()
		// cat ends at the end of its input: at once without stdin, never with it.
		pod := busyboxPod("stdin", corev1.RestartPolicyNever, "cat; echo stdin-closed > /dev/termination-log")
		pod.Spec.Containers[0].Stdin = true
		pod = createPod(t, pod)
		waitPod(t, pod, 2*time.Minute, runningAndReady)
		closed := reportPod(podNS, "nostdin", "cat; echo stdin-closed > /dev/termination-log")
		closed = createPod(t, closed)
		if term := terminated(t, closed); term.Message != "stdin-closed\n" {
			t.Errorf("without stdin: %q", term.Message)
		}
		p := waitPod(t, pod, time.Minute, runningAndReady)
		if s := p.Status.ContainerStatuses[0]; s.State.Running == nil {
			t.Errorf("with stdin the container ended: %s", describeStatuses(p.Status.ContainerStatuses))
		}
	})
}

// TestSandboxSeccompAndMaskedProc: as with the kubelet, a pod's sandbox (its pause
// process) runs under the runtime's default seccomp profile even when the pod asks for
// none, while its containers run unconfined; and a container's /proc hides what the
// kubelet's list masks, /proc/interrupts among it.
func TestSandboxSeccompAndMaskedProc(t *testing.T) {
	t.Parallel()
	requireNodeagent(t)
	pod := reportPod(podNS, "masked-proc",
		`{ grep '^Seccomp:' /proc/self/status; wc -c < /proc/interrupts; } > /dev/termination-log`)
	// A second container keeps the sandbox up once the first has reported.
	keep := pod.Spec.Containers[0]
	keep.Name, keep.Command, keep.Args = "z-keep", []string{"sleep", "3600"}, nil
	pod.Spec.Containers = append(pod.Spec.Containers, keep)
	pod = createPod(t, pod)
	if want, got := "Seccomp:\t0\n0\n", terminated(t, pod).Message; got != want {
		t.Errorf("the container saw %q, want %q (unconfined, /proc/interrupts masked)", got, want)
	}
	sbs := sandboxesOf(t, string(pod.UID))
	if len(sbs) != 1 {
		t.Fatalf("%d sandboxes of the pod, want 1", len(sbs))
	}
	rt, _ := framework.CRI(t)
	resp, err := rt.PodSandboxStatus(framework.Context(t, 30*time.Second), &runtimeapi.PodSandboxStatusRequest{PodSandboxId: sbs[0].Id, Verbose: true})
	if err != nil {
		t.Fatal(err)
	}
	var info struct{ Pid int }
	if err := json.Unmarshal([]byte(resp.Info["info"]), &info); err != nil || info.Pid == 0 {
		t.Fatalf("sandbox %s verbose info: pid %d, %v", sbs[0].Id, info.Pid, err)
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", info.Pid))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(status), "\nSeccomp:\t2\n") {
		t.Errorf("the pause process (pid %d) is not under a seccomp filter:\n%s", info.Pid, status)
	}
}
