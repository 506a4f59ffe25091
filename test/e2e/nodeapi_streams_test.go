//go:build e2e

package e2e

import (
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nodeagent/nodeagent/test/e2e/framework"
	"github.com/nodeagent/nodeagent/test/harness"
)

// sleeperScript keeps a container running and stops it at once on SIGTERM.
const sleeperScript = `trap 'exit 0' TERM; sleep 3600 & wait`

// TestKubectlExecStreams: stdin reaches the command and its end closes it, a terminal is a
// terminal of the client's size, stdout and stderr stay apart, and exit codes come back.
func TestKubectlExecStreams(t *testing.T) {
	t.Parallel()
	requireNodeagent(t)
	pod := waitPod(t, createPod(t, busyboxPod("exec", corev1.RestartPolicyAlways, sleeperScript)), 2*time.Minute, runningAndReady)

	t.Run("stdin", func(t *testing.T) {
		out, errOut, code := kubectlExitCode(t, strings.NewReader("hi\nthere\n"), "exec", "-i", pod.Name, "--", "cat")
		if code != 0 || out != "hi\nthere\n" {
			t.Errorf("echo hi | kubectl exec -i -- cat = %q (exit %d, stderr %q), want hi there", out, code, errOut)
		}
		// More than any buffer on the way, to its last byte.
		big := strings.Repeat("0123456789abcdef", 1<<16)
		out, errOut, code = kubectlExitCode(t, strings.NewReader(big), "exec", "-i", pod.Name, "--", "wc", "-c")
		if code != 0 || strings.TrimSpace(out) != fmt.Sprint(len(big)) {
			t.Errorf("kubectl exec -i -- wc -c of %d bytes = %q (exit %d, stderr %q)", len(big), out, code, errOut)
		}
	})

	t.Run("stdout and stderr", func(t *testing.T) {
		out, errOut, code := kubectlExitCode(t, nil, "exec", pod.Name, "--", "sh", "-c", "echo out; echo err >&2")
		if code != 0 || out != "out\n" || !strings.Contains(errOut, "err\n") || strings.Contains(errOut, "out") {
			t.Errorf("kubectl exec = stdout %q, stderr %q, exit %d; want out on stdout, err on stderr", out, errOut, code)
		}
	})

	t.Run("exit code", func(t *testing.T) {
		if out, errOut, code := kubectlExitCode(t, nil, "exec", pod.Name, "--", "sh", "-c", "exit 7"); code != 7 {
			t.Errorf("kubectl exec -- sh -c 'exit 7' exited %d (stdout %q, stderr %q), want 7", code, out, errOut)
		}
		if out, errOut, code := kubectlExitCode(t, nil, "exec", pod.Name, "--", "/no/such/command"); code == 0 {
			t.Errorf("kubectl exec of a missing command exited 0 (stdout %q, stderr %q)", out, errOut)
		}
	})

	t.Run("tty", func(t *testing.T) {
		// kubectl sends the terminal's size over the resize stream once the process has
		// started, as with the kubelet: the shell waits for it (5 s at most) before it prints.
		p := startKubectlTerminal(t, 33, 99, "exec", "-it", pod.Name, "--", "sh", "-c",
			`tty; i=0; while [ $i -lt 50 ]; do s=$(stty size 2>/dev/null); [ -n "$s" ] && [ "$s" != "0 0" ] && break; i=$((i+1)); sleep 0.1; done; echo "$s"`)
		if code := p.wait(t, time.Minute); code != 0 {
			t.Fatalf("kubectl exec -it exited %d: %q", code, p.out.String())
		}
		out := strings.ReplaceAll(p.out.String(), "\r\n", "\n")
		if !regexp.MustCompile(`(?m)^/dev/pts/\d+$`).MatchString(out) {
			t.Errorf("tty in kubectl exec -it printed %q, want /dev/pts/N", out)
		}
		if !regexp.MustCompile(`(?m)^33 99$`).MatchString(out) {
			t.Errorf("stty size in kubectl exec -it printed %q, want the client's 33 99", out)
		}
		p = startKubectlTerminal(t, 24, 80, "exec", "-it", pod.Name, "--", "sh", "-c", "exit 5")
		if code := p.wait(t, time.Minute); code != 5 {
			t.Errorf("kubectl exec -it -- sh -c 'exit 5' exited %d (%q), want 5", code, p.out.String())
		}
	})

	t.Run("interactive shell", func(t *testing.T) {
		p := startKubectlTerminal(t, 24, 80, "exec", "-it", pod.Name, "--", "sh")
		if _, err := io.WriteString(p.stdin, "echo $((6*7))\r"); err != nil {
			t.Fatal(err)
		}
		p.waitOutput(t, 30*time.Second, "42", func(out string) bool { return strings.Contains(out, "42") })
		if _, err := io.WriteString(p.stdin, "exit 3\r"); err != nil {
			t.Fatal(err)
		}
		if code := p.wait(t, 30*time.Second); code != 3 {
			t.Errorf("the shell exited with 3, kubectl with %d", code)
		}
	})
}

// TestKubectlAttach: attached output arrives as the container writes it, and input reaches
// a container with stdin, with or without a terminal.
func TestKubectlAttach(t *testing.T) {
	t.Parallel()
	requireNodeagent(t)
	pod := busyboxPod("attach", corev1.RestartPolicyAlways, `i=0; while true; do i=$((i+1)); echo "tick $i"; sleep 0.3; done`)
	pod.Spec.Containers[0].Name = "ticker"
	pod.Spec.Containers = append(pod.Spec.Containers,
		corev1.Container{Name: "reader", Image: harness.BusyboxImage, Stdin: true,
			Command: []string{"sh", "-c", `while read l; do echo "got $l"; done`}},
		corev1.Container{Name: "shell", Image: harness.BusyboxImage, Stdin: true, TTY: true, Command: []string{"sh"}},
	)
	pod = waitPod(t, createPod(t, pod), 2*time.Minute, runningAndReady)

	t.Run("output", func(t *testing.T) {
		p := startKubectl(t, false, "attach", pod.Name, "-c", "ticker")
		// Two ticks written after the attach: attach shows what is written from then on.
		ticks := regexp.MustCompile(`(?m)^tick \d+$`)
		p.waitOutput(t, 30*time.Second, "two ticks", func(out string) bool { return len(ticks.FindAllString(out, -1)) >= 2 })
	})

	t.Run("stdin", func(t *testing.T) {
		p := startKubectl(t, true, "attach", "-i", pod.Name, "-c", "reader")
		// The attach may be set up after a first line is written: write until one comes back.
		framework.Eventually(t, 30*time.Second, func() error {
			if _, err := io.WriteString(p.stdin, "hello\n"); err != nil {
				t.Fatalf("write to kubectl attach: %v", err)
			}
			if !strings.Contains(p.out.String(), "got hello\n") {
				return fmt.Errorf("no echo in %q (stderr %q)", p.out.String(), p.errOut.String())
			}
			return nil
		})
	})

	t.Run("tty", func(t *testing.T) {
		p := startKubectlTerminal(t, 24, 80, "attach", "-it", pod.Name, "-c", "shell")
		framework.Eventually(t, 30*time.Second, func() error {
			if _, err := io.WriteString(p.stdin, "echo $((6*7))\r"); err != nil {
				t.Fatalf("write to kubectl attach: %v", err)
			}
			if !strings.Contains(p.out.String(), "42") {
				return fmt.Errorf("no 42 in %q", p.out.String())
			}
			return nil
		})
	})
}

// TestKubectlPortForward: a local port forwarded to an agnhost HTTP server in a pod answers
// with the pod's name, over several connections.
func TestKubectlPortForward(t *testing.T) {
	t.Parallel()
	requireNodeagent(t)
	pod := busyboxPod("port-forward", corev1.RestartPolicyAlways, "")
	pod.Spec.Containers[0] = corev1.Container{
		Name: "netexec", Image: harness.AgnhostImage, Args: []string{"netexec", "--http-port=8080"},
		Ports: []corev1.ContainerPort{{ContainerPort: 8080}},
		// Ready only once netexec listens: kubectl port-forward exits when a forwarded
		// connection meets a closed port (the error stream reports it), as with a kubelet.
		ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(8080)}},
			PeriodSeconds: 1},
	}
	pod = waitPod(t, createPod(t, pod), 2*time.Minute, runningAndReady)

	p := startKubectl(t, false, "port-forward", "--address=127.0.0.1", "pod/"+pod.Name, ":8080")
	forwarding := regexp.MustCompile(`Forwarding from 127\.0\.0\.1:(\d+) -> 8080`)
	out := p.waitOutput(t, 30*time.Second, "the local port", func(out string) bool { return forwarding.MatchString(out) })
	local := "http://127.0.0.1:" + forwarding.FindStringSubmatch(out)[1]

	get := func() error {
		// A new connection each time: each one is a new stream through the node.
		client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
		resp, err := client.Get(local + "/hostname")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK || string(body) != pod.Name {
			return fmt.Errorf("GET /hostname = %d %q, want the pod name %s", resp.StatusCode, body, pod.Name)
		}
		return nil
	}
	framework.Eventually(t, 30*time.Second, get)
	for i := 0; i < 3; i++ {
		if err := get(); err != nil {
			t.Errorf("connection %d through the forward: %v", i+2, err)
		}
	}
	if p.exited() {
		t.Errorf("kubectl port-forward exited: %v %s", p.err, p.errOut.String())
	}
}
