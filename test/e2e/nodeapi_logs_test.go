//go:build e2e

package e2e

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodeagent/nodeagent/test/e2e/framework"
)

// TestKubectlLogsFollow: lines reach `kubectl logs -f` while the container runs, and the
// stream ends when the container exits.
func TestKubectlLogsFollow(t *testing.T) {
	t.Parallel()
	requireNodeagent(t)
	// The container runs until the test tells it to stop.
	pod := busyboxPod("logs-follow", corev1.RestartPolicyNever,
		`echo start; i=0; while [ ! -e /tmp/stop ]; do i=$((i+1)); echo "tick $i"; sleep 0.2; done; echo bye`)
	pod = waitPod(t, createPod(t, pod), 2*time.Minute, runningAndReady)

	p := startKubectl(t, false, "logs", "-f", pod.Name)
	p.waitOutput(t, 30*time.Second, "tick 5", func(out string) bool { return strings.Contains(out, "tick 5\n") })
	framework.Kubectl(t, "exec", pod.Name, "--", "touch", "/tmp/stop")
	if code := p.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("kubectl logs -f exited %d: %s", code, p.errOut.String())
	}
	out := p.out.String()
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if lines[0] != "start" || lines[len(lines)-1] != "bye" {
		t.Fatalf("kubectl logs -f = %q, want start … bye", tail(out, 300))
	}
	for i, l := range lines[1 : len(lines)-1] {
		if l != fmt.Sprintf("tick %d", i+1) {
			t.Fatalf("line %d of kubectl logs -f is %q, want tick %d: lost or repeated lines", i+2, l, i+1)
		}
	}
	waitPod(t, pod, time.Minute, phaseIs(corev1.PodSucceeded))
}

var timestampedLine = regexp.MustCompile(`^(\S+) (.*)$`)

// splitTimestamps parses `kubectl logs --timestamps` output into times and lines.
func splitTimestamps(t *testing.T, out string) ([]time.Time, []string) {
	t.Helper()
	var times []time.Time
	var lines []string
	for _, l := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		m := timestampedLine.FindStringSubmatch(l)
		if m == nil {
			t.Fatalf("line %q has no time stamp", l)
		}
		ts, err := time.Parse(time.RFC3339Nano, m[1])
		if err != nil || ts.Format(time.RFC3339Nano) != m[1] {
			t.Fatalf("line %q: time stamp %q is not RFC 3339 with nanoseconds (%v)", l, m[1], err)
		}
		times = append(times, ts)
		lines = append(lines, m[2])
	}
	return times, lines
}

// TestKubectlLogsOptions: --timestamps, --tail, --limit-bytes and --since on a container
// that writes a line every half second.
func TestKubectlLogsOptions(t *testing.T) {
	t.Parallel()
	requireNodeagent(t)
	pod := busyboxPod("logs-opts", corev1.RestartPolicyAlways,
		`echo early; i=0; while true; do i=$((i+1)); echo "tick $i"; sleep 0.5; done`)
	created := time.Now()
	pod = waitPod(t, createPod(t, pod), 2*time.Minute, runningAndReady)

	// Wait until "early" is 4 s old, so that --since=2s must leave it out.
	var early time.Time
	framework.Eventually(t, time.Minute, func() error {
		out, err := framework.KubectlErr(t, "logs", pod.Name, "--timestamps")
		if err != nil {
			return err
		}
		times, lines := splitTimestamps(t, out)
		if lines[0] != "early" {
			t.Fatalf("first line %q, want early", lines[0])
		}
		early = times[0]
		if time.Since(early) < 4*time.Second {
			return fmt.Errorf("early was written %s ago", time.Since(early))
		}
		return nil
	})

	t.Run("timestamps", func(t *testing.T) {
		out := framework.Kubectl(t, "logs", pod.Name, "--timestamps")
		after := time.Now()
		times, lines := splitTimestamps(t, out)
		for i, ts := range times {
			if ts.Before(created) || ts.After(after) {
				t.Errorf("line %q stamped %s, outside the pod's life so far %s…%s", lines[i], ts, created, after)
			}
			if i > 0 && ts.Before(times[i-1]) {
				t.Errorf("line %q stamped %s, before the line above it (%s)", lines[i], ts, times[i-1])
			}
		}
		plain := framework.Kubectl(t, "logs", pod.Name)
		if want := strings.Join(lines, "\n") + "\n"; !strings.HasPrefix(plain, want) {
			t.Errorf("the lines of --timestamps %q are not those of plain logs %q", tail(want, 200), tail(plain, 200))
		}
	})

	t.Run("tail", func(t *testing.T) {
		if out := framework.Kubectl(t, "logs", pod.Name, "--tail=0"); out != "" {
			t.Errorf("--tail=0 = %q, want nothing", out)
		}
		last := lastTick(t, framework.Kubectl(t, "logs", pod.Name))
		out := framework.Kubectl(t, "logs", pod.Name, "--tail=2")
		lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
		if len(lines) != 2 {
			t.Fatalf("--tail=2 = %q, want 2 lines", out)
		}
		first := lastTick(t, lines[0])
		if lines[1] != fmt.Sprintf("tick %d", first+1) || first+1 < last {
			t.Errorf("--tail=2 = %q, want two consecutive ticks ending at or after tick %d", out, last)
		}
	})

	t.Run("limit-bytes", func(t *testing.T) {
		if out := framework.Kubectl(t, "logs", pod.Name, "--limit-bytes=9"); out != "early\ntic" {
			t.Errorf("--limit-bytes=9 = %q, want %q", out, "early\ntic")
		}
	})

	t.Run("since", func(t *testing.T) {
		// The container writes twice a second; a loaded machine may hold it back for a
		// while, so an empty answer is asked again. No answer may hold an older line.
		framework.Eventually(t, 30*time.Second, func() error {
			before := time.Now()
			out := framework.Kubectl(t, "logs", pod.Name, "--since=2s", "--timestamps")
			if out == "" {
				return fmt.Errorf("--since=2s returned nothing")
			}
			times, lines := splitTimestamps(t, out)
			for i, ts := range times {
				if ts.Before(before.Add(-2 * time.Second)) {
					t.Fatalf("--since=2s returned %q stamped %s, more than 2 s before the request (%s)", lines[i], ts, before)
				}
			}
			if lines[0] == "early" {
				t.Fatalf("--since=2s returned the line written at %s", early)
			}
			return nil
		})
	})
}

// lastTick returns N of the last "tick N" line in out.
func lastTick(t *testing.T, out string) int {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	l := lines[len(lines)-1]
	n, err := strconv.Atoi(strings.TrimPrefix(l, "tick "))
	if err != nil {
		t.Fatalf("last line %q is not a tick", l)
	}
	return n
}

// TestKubectlLogsPrevious: after a restart, --previous shows the earlier instance's output
// and plain logs the current one's.
func TestKubectlLogsPrevious(t *testing.T) {
	t.Parallel()
	requireNodeagent(t)
	// The first instance fails at once; the second stays. A counter in an emptyDir tells
	// them apart.
	pod := busyboxPod("logs-previous", corev1.RestartPolicyAlways,
		`n=$(cat /data/n 2>/dev/null || echo 0); n=$((n+1)); echo $n > /data/n; echo "instance $n"; `+
			`[ $n -gt 1 ] || exit 1; trap 'exit 0' TERM; sleep 3600 & wait`)
	pod.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	pod.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}
	pod = waitPod(t, createPod(t, pod), 2*time.Minute, func(p *corev1.Pod) error {
		if err := runningAndReady(p); err != nil {
			return err
		}
		if n := p.Status.ContainerStatuses[0].RestartCount; n < 1 {
			return fmt.Errorf("restartCount %d", n)
		}
		return nil
	})
	framework.Eventually(t, 30*time.Second, func() error {
		out, err := framework.KubectlErr(t, "logs", pod.Name)
		if err != nil || out != "instance 2\n" {
			return fmt.Errorf("kubectl logs = %q, %v; want instance 2", out, err)
		}
		return nil
	})
	if out := framework.Kubectl(t, "logs", pod.Name, "--previous"); out != "instance 1\n" {
		t.Errorf("kubectl logs --previous = %q, want instance 1", out)
	}
	if out := framework.Kubectl(t, "logs", pod.Name, "-p", "--timestamps", "-c", "main"); !strings.HasSuffix(out, " instance 1\n") {
		t.Errorf("kubectl logs -p --timestamps -c main = %q, want instance 1", out)
	}
}

// TestKubectlLogsPreviousWithoutRestart: a container that never restarted has no previous
// log, and kubectl says so.
func TestKubectlLogsPreviousWithoutRestart(t *testing.T) {
	t.Parallel()
	requireNodeagent(t)
	pod := busyboxPod("logs-noprev", corev1.RestartPolicyAlways, `echo only; trap 'exit 0' TERM; sleep 3600 & wait`)
	pod = waitPod(t, createPod(t, pod), 2*time.Minute, runningAndReady)
	out, err := framework.KubectlErr(t, "logs", pod.Name, "--previous")
	want := fmt.Sprintf(`previous terminated container "main" in pod %q not found`, pod.Name)
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("kubectl logs --previous without a restart = %q, %v; want the kubelet's %q", out, err, want)
	}
}
