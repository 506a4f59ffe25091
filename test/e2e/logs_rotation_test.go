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
}
