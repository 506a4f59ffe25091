//go:build e2e

package e2e

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

// idMapping is one line of /proc/<pid>/uid_map or gid_map.
type idMapping struct{ inside, outside, length uint64 }

func parseIDMap(t *testing.T, what, out string) []idMapping {
	t.Helper()
	var maps []idMapping
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 {
			t.Fatalf("%s: line %q, want three numbers", what, line)
		}
		var m idMapping
		for i, p := range []*uint64{&m.inside, &m.outside, &m.length} {
			v, err := strconv.ParseUint(f[i], 10, 64)
			if err != nil {
				t.Fatalf("%s: line %q: %v", what, line, err)
			}
			*p = v
		}
		maps = append(maps, m)
	}
	return maps
}

// hostCredentials finds the one process of the machine whose command line is cmdline and
// returns its real uid and gid as the host sees them.
func hostCredentials(t *testing.T, cmdline string) (uid, gid uint64) {
	t.Helper()
	// The shell execs into the command after writing its file: wait, with a
	// deadline, for that exec to have happened.
	var found []string
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		found = nil
		uid, gid = scanCredentials(t, cmdline, &found)
		if len(found) == 1 || time.Now().After(deadline) {
			break
		}
	}
	if len(found) != 1 {
		t.Fatalf("processes %q on the host: %v, want one", cmdline, found)
	}
	return uid, gid
}

// scanCredentials appends to found every process whose command line is cmdline and
// returns the real uid and gid of the last one.
func scanCredentials(t *testing.T, cmdline string, found *[]string) (uid, gid uint64) {
	t.Helper()
	procs, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatalf("read /proc: %v", err)
	}
	for _, p := range procs {
		if _, err := strconv.Atoi(p.Name()); err != nil {
			continue
		}
		cmd, err := os.ReadFile(filepath.Join("/proc", p.Name(), "cmdline"))
		if err != nil || strings.TrimRight(strings.ReplaceAll(string(cmd), "\x00", " "), " ") != cmdline {
			continue
		}
		status, err := os.ReadFile(filepath.Join("/proc", p.Name(), "status"))
		if err != nil {
			continue
		}
		*found = append(*found, p.Name())
		for _, line := range strings.Split(string(status), "\n") {
			f := strings.Fields(line)
			if len(f) < 2 {
				continue
			}
			switch f[0] {
			case "Uid:":
				uid, _ = strconv.ParseUint(f[1], 10, 64)
			case "Gid:":
				gid, _ = strconv.ParseUint(f[1], 10, 64)
			}
		}
	}
	return uid, gid
}

// TestUserNamespacePods: a pod with hostUsers: false runs in a user namespace of its own,
// as on a kubelet node: root inside is an unprivileged range of the host's IDs (above
// 0-65535, 65536 of them, the kubelet's defaults), the process the host sees runs as that
// range's first ID, not root; the pod still writes to its emptyDir and reads its projected
// service account token (idmapped mounts); a second such pod gets a range of its own.
func TestUserNamespacePods(t *testing.T) {
	t.Parallel()
	requireNodeagent(t)
	ns := newNamespace(t, "userns")
	const (
		idsPerPod = 65536
		firstID   = 65536 // the kubelet's default range starts above the host's 0-65535
	)
	type result struct {
		uid, gid idMapping
	}
	run := func(t *testing.T, name, marker string) result {
		pod := reportPod(ns, name, "echo written > /scratch/file && exec sleep "+marker)
		pod.Spec.RestartPolicy = corev1.RestartPolicyAlways
		pod.Spec.HostUsers = ptr.To(false)
		pod.Spec.Volumes = []corev1.Volume{{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
		pod.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "scratch", MountPath: "/scratch"}}
		pod = createPod(t, pod)
		waitPod(t, pod, 2*time.Minute, runningAndReady)

		var r result
		for _, m := range []struct {
			file string
			into *idMapping
		}{{"/proc/self/uid_map", &r.uid}, {"/proc/self/gid_map", &r.gid}} {
			maps := parseIDMap(t, m.file, mustExec(t, pod, "main", "cat", m.file))
			if len(maps) != 1 || maps[0].inside != 0 || maps[0].length != idsPerPod ||
				maps[0].outside < firstID || maps[0].outside%idsPerPod != 0 {
				t.Fatalf("%s of %s: %+v, want one mapping of 0 onto a multiple of %d from %d on, %d IDs long (not the host's %q)",
					m.file, pod.Name, maps, idsPerPod, firstID, idsPerPod, "0 0 4294967295")
			}
			*m.into = maps[0]
		}
		if id := strings.TrimSpace(mustExec(t, pod, "main", "id", "-u")); id != "0" {
			t.Errorf("id -u in %s: %q, want 0 (root inside its namespace)", pod.Name, id)
		}
		if got := strings.TrimSpace(mustExec(t, pod, "main", "cat", "/scratch/file")); got != "written" {
			t.Errorf("the emptyDir of %s holds %q, want what its container wrote", pod.Name, got)
		}
		if tok := strings.TrimSpace(mustExec(t, pod, "main", "cat", "/var/run/secrets/kubernetes.io/serviceaccount/token")); strings.Count(tok, ".") != 2 {
			t.Errorf("the projected token of %s reads %q, want a JWT", pod.Name, tok)
		}
		uid, gid := hostCredentials(t, "sleep "+marker)
		if uid != r.uid.outside || gid != r.gid.outside {
			t.Errorf("the host sees %s's process as uid %d gid %d, want %d and %d (its namespace's root)", pod.Name, uid, gid, r.uid.outside, r.gid.outside)
		}
		return r
	}
	a := run(t, "userns-a", "86391")
	b := run(t, "userns-b", "86392")
	overlap := func(x, y idMapping) bool { return x.outside < y.outside+y.length && y.outside < x.outside+x.length }
	if overlap(a.uid, b.uid) || overlap(a.gid, b.gid) {
		t.Errorf("two pods share host IDs: %+v and %+v", a, b)
	}
}
