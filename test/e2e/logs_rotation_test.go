//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/nodeagent/nodeagent/test/e2e/framework"
	"github.com/nodeagent/nodeagent/test/harness"
)

// TestChattyContainerLogsRotate: a container writing ~4.5 KB/s keeps its log directory within
// containerLogMaxFiles files of containerLogMaxSize each — plus, as with the kubelet, what it
// writes between two checks (containerLogMonitorInterval, 10 s) — rotated files appear, and
// kubectl logs keeps following the newest lines.
func TestChattyContainerLogsRotate(t *testing.T) {
	t.Parallel()
	requireNodeagent(t)
	line := strings.Repeat("x", 400)
	pod := busyboxPod("chatty", corev1.RestartPolicyAlways,
		"i=0; while true; do i=$((i+1)); echo \"$i "+line+"\"; sleep 0.1; done")
	pod = waitPod(t, createPod(t, pod), 2*time.Minute, runningAndReady)
	// A follow from the start must see every line once, in order, across the rotations.
	follow := startKubectl(t, false, "logs", "-f", pod.Name)
	dir := filepath.Join("/var/log/pods", fmt.Sprintf("%s_%s_%s", pod.Namespace, pod.Name, pod.UID), "main")
	maxSize := resource.MustParse(harness.ContainerLogMaxSize)
	const perCheck = 10 * 10 * 450 // 10 s of 10 lines/s, with the CRI's timestamp prefix
	limit := (maxSize.Value() + perCheck) * harness.ContainerLogMaxFiles

	var sawRotated, sawGzip bool
	lastSeq := 0
	framework.Eventually(t, 3*time.Minute, func() error {
		entries, err := os.ReadDir(dir)
		if err != nil {
			return err
		}
		var total int64
		var names []string
		for _, e := range entries {
			fi, err := e.Info()
			if err != nil {
				continue
			}
			total += fi.Size()
			names = append(names, e.Name())
			if strings.HasPrefix(e.Name(), "0.log.") {
				sawRotated = true
			}
			if strings.HasSuffix(e.Name(), ".gz") {
				sawGzip = true
			}
		}
		if len(names) > harness.ContainerLogMaxFiles {
			t.Fatalf("%d log files %v, more than containerLogMaxFiles %d", len(names), names, harness.ContainerLogMaxFiles)
		}
		if total > limit {
			t.Fatalf("log files %v hold %d bytes, more than %d", names, total, limit)
		}
		out, err := framework.KubectlErr(t, "logs", pod.Name, "--tail=1")
		if err != nil {
			return err
		}
		seq, _ := strconv.Atoi(strings.Fields(out + " 0")[0])
		if seq < lastSeq {
			t.Fatalf("kubectl logs went back from line %d to %d", lastSeq, seq)
		}
		lastSeq = seq
		// Three rotations' worth of writing: the oldest rotated file got compressed or removed.
		if !sawRotated || seq < 3*int(maxSize.Value())/len(line) {
			return fmt.Errorf("line %d, files %v (%d bytes)", seq, names, total)
		}
		return nil
	})
	t.Logf("rotated: %v, a gzipped file seen: %v, last line %d", sawRotated, sawGzip, lastSeq)

	// The whole log as kubectl shows it after rotations: what the kept files hold, without
	// a gap, up to the newest line.
	first, last := checkSequence(t, "kubectl logs", framework.Kubectl(t, "logs", pod.Name), line)
	if last < lastSeq {
		t.Errorf("kubectl logs ends at line %d, but line %d was seen before", last, lastSeq)
	}
	t.Logf("kubectl logs after rotations: lines %d to %d", first, last)
	out := follow.waitOutput(t, time.Minute, fmt.Sprintf("line %d", last), func(out string) bool {
		return strings.Contains(out, fmt.Sprintf("\n%d %s\n", last, line))
	})
	if follow.exited() {
		t.Fatalf("kubectl logs -f ended while the container runs: %v %s", follow.err, follow.errOut.String())
	}
	// Up to the last complete line: the follow keeps going.
	out = out[:strings.LastIndex(out, "\n")+1]
	if first, last := checkSequence(t, "kubectl logs -f", out, line); first != 1 {
		t.Errorf("kubectl logs -f started at line %d, want 1", first)
	} else {
		t.Logf("kubectl logs -f across rotations: lines 1 to %d", last)
	}
}

// checkSequence checks that out is lines "<n> <line>" with n counting up by one, and
// returns the first and last n.
func checkSequence(t *testing.T, what, out, line string) (int, int) {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	first, last := 0, 0
	for i, l := range lines {
		n, rest, _ := strings.Cut(l, " ")
		seq, err := strconv.Atoi(n)
		if err != nil || rest != line {
			t.Fatalf("%s: line %d is %.60q…, want a number and the line", what, i+1, l)
		}
		if i == 0 {
			first = seq
		} else if seq != last+1 {
			t.Fatalf("%s: line %d follows line %d: lines lost or repeated", what, seq, last)
		}
		last = seq
	}
	return first, last
}
