//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/nodeagent/nodeagent/test/e2e/framework"
	"github.com/nodeagent/nodeagent/test/harness"
)

// newNamespace creates a namespace of its own for a test, waits for its
// default service account, and deletes it when the test ends.
func newNamespace(t *testing.T, prefix string) string {
	t.Helper()
	cs := framework.Client(t)
	ns, err := cs.CoreV1().Namespaces().Create(framework.Context(t, 30*time.Second),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	t.Cleanup(func() {
		_ = cs.CoreV1().Namespaces().Delete(context.Background(), ns.Name, metav1.DeleteOptions{})
	})
	framework.Eventually(t, time.Minute, func() error {
		_, err := cs.CoreV1().ServiceAccounts(ns.Name).Get(context.Background(), "default", metav1.GetOptions{})
		return err
	})
	return ns.Name
}

// reportPod runs script once in busybox; what the script writes to
// /dev/termination-log comes back as the container's termination
// message, which is how these tests read what the process saw.
func reportPod(ns, prefix, script string) *corev1.Pod {
	p := busyboxPod(prefix, corev1.RestartPolicyNever, script)
	p.Namespace = ns
	return p
}

// terminated waits for the pod's first container to end and returns its
// terminated state.
func terminated(t *testing.T, pod *corev1.Pod) *corev1.ContainerStateTerminated {
	t.Helper()
	p := waitPod(t, pod, 2*time.Minute, func(p *corev1.Pod) error {
		if len(p.Status.ContainerStatuses) == 0 || p.Status.ContainerStatuses[0].State.Terminated == nil {
			return fmt.Errorf("not terminated: %s", describeStatuses(p.Status.ContainerStatuses))
		}
		return nil
	})
	return p.Status.ContainerStatuses[0].State.Terminated
}

// envOf parses `env` output.
func envOf(out string) map[string]string {
	m := map[string]string{}
	for _, l := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(l, "="); ok {
			m[k] = v
		}
	}
	return m
}

// TestContainerSeesItsEnvironment: every kind of env source reaches the
// process, $(VAR) references expand in env and command, and the service
// variables of the namespace and of the kubernetes service are set.
func TestContainerSeesItsEnvironment(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t, "env")
	cs := framework.Client(t)
	ctx := framework.Context(t, time.Minute)
	if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cfg"},
		Data: map[string]string{"greeting": "hello", "color": "blue", "1digit": "x"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "sec"},
		Data: map[string][]byte{"password": []byte("hunter2")}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	svc, err := cs.CoreV1().Services(ns).Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "my-svc"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "web", Port: 8080}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	kube, err := cs.CoreV1().Services("default").Get(ctx, "kubernetes", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	field := func(name, path string) corev1.EnvVar {
		return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}}
	}
	// The shell drops names that are not identifiers from what it passes on; the
	// environment the container was started with is in /proc/1/environ.
	pod := reportPod(ns, "env", `env > /dev/termination-log; echo "ARGS=$0|$1" >> /dev/termination-log; tr '\0' '\n' < /proc/1/environ | grep '^1digit=' >> /dev/termination-log`)
	pod.Labels = map[string]string{"app": "env-test"}
	c := &pod.Spec.Containers[0]
	c.Command = []string{"sh", "-c", c.Command[2], "$(GREETING)", "$$(GREETING)"}
	c.Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")}
	c.EnvFrom = []corev1.EnvFromSource{
		{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}}},
		{Prefix: "CM_", ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}}},
	}
	c.Env = []corev1.EnvVar{
		{Name: "PLAIN", Value: "plain"},
		{Name: "GREETING", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}, Key: "greeting"}}},
		{Name: "PASSWORD", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "sec"}, Key: "password"}}},
		{Name: "OPTIONAL", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "nope"}, Key: "k", Optional: ptr.To(true)}}},
		{Name: "COMPOSED", Value: "$(GREETING)-$(CM_color)-$$(PLAIN)-$(UNDEFINED)"},
		field("POD_NAME", "metadata.name"), field("POD_NAMESPACE", "metadata.namespace"), field("POD_UID", "metadata.uid"),
		field("APP", "metadata.labels['app']"), field("NODE_NAME", "spec.nodeName"), field("SA", "spec.serviceAccountName"),
		field("HOST_IP", "status.hostIP"), field("POD_IP", "status.podIP"), field("POD_IPS", "status.podIPs"),
		{Name: "MEM_LIMIT_MI", ValueFrom: &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{Resource: "limits.memory", Divisor: resource.MustParse("1Mi")}}},
		{Name: "CPU_LIMIT", ValueFrom: &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{Resource: "limits.cpu"}}},
	}
	pod = createPod(t, pod)
	term := terminated(t, pod)
	if term.ExitCode != 0 {
		t.Fatalf("exit %d: %s", term.ExitCode, term.Message)
	}
	got := envOf(term.Message)
	p, err := cs.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	node := getNode(t)
	want := map[string]string{
		"PLAIN": "plain", "GREETING": "hello", "color": "blue", "1digit": "x", "CM_1digit": "x", "PASSWORD": "hunter2", "CM_greeting": "hello", "CM_color": "blue",
		"COMPOSED": "hello-blue-$(PLAIN)-$(UNDEFINED)", "ARGS": "hello|$(GREETING)",
		"POD_NAME": p.Name, "POD_NAMESPACE": ns, "POD_UID": string(p.UID), "APP": "env-test",
		"NODE_NAME": p.Spec.NodeName, "SA": "default", "HOST_IP": p.Status.HostIP, "POD_IP": p.Status.PodIP,
		"POD_IPS": p.Status.PodIPs[0].IP, "MEM_LIMIT_MI": "64",
		"CPU_LIMIT":                  fmt.Sprint(node.Status.Allocatable.Cpu().Value()),
		"MY_SVC_SERVICE_HOST":        svc.Spec.ClusterIP,
		"MY_SVC_SERVICE_PORT":        "8080",
		"MY_SVC_SERVICE_PORT_WEB":    "8080",
		"MY_SVC_PORT":                "tcp://" + svc.Spec.ClusterIP + ":8080",
		"MY_SVC_PORT_8080_TCP_PROTO": "tcp",
		"MY_SVC_PORT_8080_TCP_ADDR":  svc.Spec.ClusterIP,
		"KUBERNETES_SERVICE_HOST":    kube.Spec.ClusterIP,
		"KUBERNETES_SERVICE_PORT":    fmt.Sprint(kube.Spec.Ports[0].Port),
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
	for _, k := range []string{"OPTIONAL"} {
		if _, ok := got[k]; ok {
			t.Errorf("%s is set", k)
		}
	}
	if t.Failed() {
		t.Logf("environment:\n%s", term.Message)
	}
	// Since RelaxedEnvironmentVariableValidation a key starting with a digit is a name
	// like any other: no warning.
	if ev := podEvents(t, pod); hasEvent(ev, "InvalidEnvironmentVariableNames", "") {
		t.Errorf("an InvalidEnvironmentVariableNames event for valid names:\n%s", eventSummary(ev))
	}
}

// TestMissingConfigMapKeyHoldsContainer: a reference to a configMap that
// does not exist, then to a key it lacks, keeps the container waiting
// with CreateContainerConfigError naming what is missing; it starts once
// the key appears.
func TestMissingConfigMapKeyHoldsContainer(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t, "cmref")
	cs := framework.Client(t)
	pod := busyboxPod("cmref", corev1.RestartPolicyAlways, "echo $MODE; sleep 3600")
	pod.Namespace = ns
	pod.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "MODE", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: "settings"}, Key: "mode"}}}}
	pod = createPod(t, pod)
	waitConfigError := func(msg string) {
		waitPod(t, pod, time.Minute, func(p *corev1.Pod) error {
			if len(p.Status.ContainerStatuses) == 0 {
				return fmt.Errorf("no container status")
			}
			w := p.Status.ContainerStatuses[0].State.Waiting
			if w == nil || w.Reason != "CreateContainerConfigError" || w.Message != msg {
				return fmt.Errorf("containers %s, want CreateContainerConfigError %q", describeStatuses(p.Status.ContainerStatuses), msg)
			}
			return nil
		})
	}
	waitConfigError(`configmap "settings" not found`)

	ctx := framework.Context(t, time.Minute)
	cm, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "settings"},
		Data: map[string]string{"other": "x"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitConfigError("couldn't find key mode in ConfigMap " + ns + "/settings")

	cm.Data["mode"] = "fast"
	if _, err := cs.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPod(t, pod, time.Minute, runningAndReady)
	if ev := podEvents(t, pod); !hasEvent(ev, "Failed", `Error: configmap "settings" not found`) {
		t.Errorf("no Failed event naming the configMap:\n%s", eventSummary(ev))
	}
}

// TestSecurityContextReachesProcess: users, groups, capabilities,
// no_new_privs, seccomp, a read-only root and pod sysctls reach the
// process as the API describes them.
func TestSecurityContextReachesProcess(t *testing.T) {
	t.Parallel()
	const report = `{
echo uid=$(id -u); echo gid=$(id -g); echo groups=$(id -G)
sed -n -E 's/^(CapEff|CapBnd|NoNewPrivs|Seccomp):[[:space:]]*/\1=/p' /proc/self/status
touch /tmp/probe 2>/dev/null && echo root=rw || echo root=ro
echo shm_rmid_forced=$(cat /proc/sys/kernel/shm_rmid_forced)
} > /dev/termination-log`
	for _, tc := range []struct {
		name       string
		mutate     func(*corev1.Pod)
		want       map[string]string
		groups     []string
		privileged bool
	}{
		{
			name: "non-root with groups, no escalation and the runtime's seccomp profile",
			mutate: func(p *corev1.Pod) {
				p.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsUser: ptr.To[int64](1000), RunAsGroup: ptr.To[int64](3000),
					FSGroup: ptr.To[int64](2000), SupplementalGroups: []int64{4000},
					SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
					Sysctls:        []corev1.Sysctl{{Name: "kernel.shm_rmid_forced", Value: "1"}}}
				p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false)}
			},
			want: map[string]string{"uid": "1000", "gid": "3000", "CapEff": "0000000000000000", "NoNewPrivs": "1",
				"Seccomp": "2", "root": "rw", "shm_rmid_forced": "1"},
			groups: []string{"2000", "3000", "4000"},
		},
		{
			name: "root with one capability on a read-only root",
			mutate: func(p *corev1.Pod) {
				p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{ReadOnlyRootFilesystem: ptr.To(true),
					Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}, Add: []corev1.Capability{"NET_ADMIN"}}}
			},
			want: map[string]string{"uid": "0", "gid": "0", "CapEff": "0000000000001000", "NoNewPrivs": "0",
				"Seccomp": "0", "root": "ro", "shm_rmid_forced": "0"},
		},
		{
			name: "privileged",
			mutate: func(p *corev1.Pod) {
				p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: ptr.To(true)}
			},
			want:       map[string]string{"uid": "0", "gid": "0", "NoNewPrivs": "0", "root": "rw"},
			privileged: true,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pod := reportPod(podNS, "secctx", report)
			tc.mutate(pod)
			pod = createPod(t, pod)
			term := terminated(t, pod)
			if term.ExitCode != 0 {
				t.Fatalf("exit %d, report %q", term.ExitCode, term.Message)
			}
			got := envOf(term.Message)
			for k, v := range tc.want {
				if got[k] != v {
					t.Errorf("%s = %q, want %q (report %q)", k, got[k], v, term.Message)
				}
			}
			if tc.privileged && (got["CapEff"] != got["CapBnd"] || got["CapEff"] <= "00000000a80425fb") {
				// Every capability the kernel has, whatever their number.
				t.Errorf("privileged CapEff %s CapBnd %s, want every capability", got["CapEff"], got["CapBnd"])
			}
			for _, g := range tc.groups {
				if !strings.Contains(" "+got["groups"]+" ", " "+g+" ") {
					t.Errorf("groups %q lack %s", got["groups"], g)
				}
			}
		})
	}
}

// TestRunAsNonRootRefusesRootImage: an image that runs as root under
// runAsNonRoot is not started; the container waits with the kubelet's
// reason and message.
func TestRunAsNonRootRefusesRootImage(t *testing.T) {
	t.Parallel()
	pod := busyboxPod("nonroot", corev1.RestartPolicyAlways, "sleep 3600")
	pod.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true)}
	pod = createPod(t, pod)
	waitPod(t, pod, time.Minute, func(p *corev1.Pod) error {
		if len(p.Status.ContainerStatuses) == 0 {
			return fmt.Errorf("no container status")
		}
		w := p.Status.ContainerStatuses[0].State.Waiting
		want := fmt.Sprintf("container has runAsNonRoot and image will run as root (pod: %q, container: main)",
			fmt.Sprintf("%s_%s(%s)", p.Name, p.Namespace, p.UID))
		if w == nil || w.Reason != "CreateContainerConfigError" || w.Message != want {
			return fmt.Errorf("containers %s, want CreateContainerConfigError %q", describeStatuses(p.Status.ContainerStatuses), want)
		}
		return nil
	})
}

// TestManagedEtcHosts: the agent writes the pod's /etc/hosts with its
// address, hostname and FQDN and its hostAliases; a host-network pod gets
// the node's.
func TestManagedEtcHosts(t *testing.T) {
	t.Parallel()
	aliases := []corev1.HostAlias{{IP: "10.123.0.1", Hostnames: []string{"foo.remote", "bar.remote"}}}
	t.Run("pod network", func(t *testing.T) {
		t.Parallel()
		pod := reportPod(podNS, "hosts", "{ cat /etc/hosts; echo hostname=$(hostname); } > /dev/termination-log")
		pod.Spec.Hostname, pod.Spec.Subdomain, pod.Spec.HostAliases = "db-0", "db", aliases
		pod = createPod(t, pod)
		term := terminated(t, pod)
		p, err := framework.Client(t).CoreV1().Pods(podNS).Get(framework.Context(t, time.Minute), pod.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{
			"# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n",
			fmt.Sprintf("%s\tdb-0.db.%s.svc.%s\tdb-0\n", p.Status.PodIP, podNS, harness.ClusterDomain),
			"\n# Entries added by HostAliases.\n10.123.0.1\tfoo.remote\tbar.remote\n",
			"\nhostname=db-0\n",
		} {
			if !strings.Contains(term.Message, want) {
				t.Errorf("/etc/hosts lacks %q:\n%s", want, term.Message)
			}
		}
	})
	t.Run("hostname as FQDN", func(t *testing.T) {
		t.Parallel()
		pod := reportPod(podNS, "fqdn", "hostname > /dev/termination-log")
		pod.Spec.Hostname, pod.Spec.Subdomain, pod.Spec.SetHostnameAsFQDN = "web", "sub", ptr.To(true)
		pod = createPod(t, pod)
		term := terminated(t, pod)
		if want := fmt.Sprintf("web.sub.%s.svc.%s\n", podNS, harness.ClusterDomain); term.Message != want {
			t.Errorf("hostname %q, want %q", term.Message, want)
		}
	})
	t.Run("host network", func(t *testing.T) {
		t.Parallel()
		pod := reportPod(podNS, "hosts-hostnet", "cat /etc/hosts > /dev/termination-log")
		pod.Spec.HostNetwork, pod.Spec.HostAliases = true, aliases
		pod = createPod(t, pod)
		term := terminated(t, pod)
		if !strings.HasPrefix(term.Message, "# Kubernetes-managed hosts file (host network).\n") ||
			!strings.HasSuffix(term.Message, "# Entries added by HostAliases.\n10.123.0.1\tfoo.remote\tbar.remote\n") {
			t.Errorf("host-network /etc/hosts:\n%s", term.Message)
		}
	})
}

// TestTerminationMessage: the file at terminationMessagePath, or under
// FallbackToLogsOnError the end of a failed container's log, becomes the
// terminated state's message; the file is cut to its last 4 KiB.
func TestTerminationMessage(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		script string
		policy corev1.TerminationMessagePolicy
		path   string
		exit   int32
		check  func(string) error
	}{
		{name: "file at a custom path", script: "printf 'all done' > /tmp/msg", path: "/tmp/msg", policy: corev1.TerminationMessageReadFile,
			check: func(m string) error { return expect(m == "all done", "message %q", m) }},
		{name: "fallback to logs on error", script: "for i in $(seq 1 100); do echo line $i; done; exit 3", policy: corev1.TerminationMessageFallbackToLogsOnError, exit: 3,
			check: func(m string) error {
				return expect(strings.HasPrefix(m, "line 21\n") && strings.HasSuffix(m, "line 100\n"), "message %q, want lines 21..100", m)
			}},
		{name: "no fallback on success", script: "echo chatty", policy: corev1.TerminationMessageFallbackToLogsOnError,
			check: func(m string) error { return expect(m == "", "message %q, want none", m) }},
		{name: "file kept to its last 4 KiB", script: "printf '%5000s' '' | tr ' ' a > /dev/termination-log; printf END >> /dev/termination-log", policy: corev1.TerminationMessageReadFile,
			check: func(m string) error {
				return expect(len(m) == 4096 && strings.HasSuffix(m, "aEND"), "message of %d bytes ending %q", len(m), m[max(0, len(m)-8):])
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pod := reportPod(podNS, "termmsg", tc.script)
			c := &pod.Spec.Containers[0]
			c.TerminationMessagePolicy = tc.policy
			if tc.path != "" {
				c.TerminationMessagePath = tc.path
			}
			pod = createPod(t, pod)
			term := terminated(t, pod)
			if term.ExitCode != tc.exit {
				t.Errorf("exit %d, want %d", term.ExitCode, tc.exit)
			}
			if err := tc.check(term.Message); err != nil {
				t.Error(err)
			}
		})
	}
}

func expect(ok bool, format string, args ...any) error {
	if ok {
		return nil
	}
	return fmt.Errorf(format, args...)
}
