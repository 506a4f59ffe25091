package runtime

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func TestTerminationMessage(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	var log strings.Builder
	for i := 0; i < 100; i++ {
		fmt.Fprintf(&log, "2026-01-01T00:00:00.000000000Z stdout F line %d\n", i)
	}
	log.WriteString("2026-01-01T00:00:00.000000000Z stderr P part-\n2026-01-01T00:00:00.000000000Z stderr F end\n")
	logPath := write("0.log", log.String())
	var long strings.Builder
	for i := 0; i < 60; i++ {
		fmt.Fprintf(&long, "2026-01-01T00:00:00.000000000Z stdout F %s\n", strings.Repeat("x", 99))
	}
	longLog := write("long.log", long.String())
	msgFile := write("msg", "bye")
	emptyFile := write("empty", "")
	bigFile := write("big", strings.Repeat("a", 100)+strings.Repeat("b", MaxTerminationMessage))

	status := func(policy v1.TerminationMessagePolicy, exit int32, host, logp string) *runtimeapi.ContainerStatus {
		return &runtimeapi.ContainerStatus{
			State: runtimeapi.ContainerState_CONTAINER_EXITED, ExitCode: exit, LogPath: logp,
			Annotations: map[string]string{AnnotationTerminationMessagePath: "/dev/termination-log", AnnotationTerminationMessagePolicy: string(policy)},
			Mounts:      []*runtimeapi.Mount{{ContainerPath: "/data", HostPath: dir}, {ContainerPath: "/dev/termination-log", HostPath: host}},
		}
	}
	var tail strings.Builder
	for i := 22; i < 100; i++ {
		fmt.Fprintf(&tail, "line %d\n", i)
	}
	tail.WriteString("part-end\n")
	for _, tc := range []struct {
		name string
		st   *runtimeapi.ContainerStatus
		want string
	}{
		{name: "file", st: status(v1.TerminationMessageReadFile, 1, msgFile, logPath), want: "bye"},
		{name: "file kept over logs", st: status(v1.TerminationMessageFallbackToLogsOnError, 1, msgFile, logPath), want: "bye"},
		{name: "empty file, File policy", st: status(v1.TerminationMessageReadFile, 1, emptyFile, logPath), want: ""},
		{name: "empty file, success", st: status(v1.TerminationMessageFallbackToLogsOnError, 0, emptyFile, logPath), want: ""},
		{name: "empty file, failure: last 80 log lines", st: status(v1.TerminationMessageFallbackToLogsOnError, 2, emptyFile, logPath), want: tail.String()},
		{name: "missing file, failure", st: status(v1.TerminationMessageFallbackToLogsOnError, 2, filepath.Join(dir, "nope"), logPath), want: tail.String()},
		{name: "log capped at 2 KiB", st: status(v1.TerminationMessageFallbackToLogsOnError, 2, emptyFile, longLog),
			want: strings.Repeat(strings.Repeat("x", 99)+"\n", 21)[100*21-2048:]},
		{name: "file capped at its last 4 KiB", st: status(v1.TerminationMessageReadFile, 0, bigFile, ""), want: strings.Repeat("b", MaxTerminationMessage)},
		{name: "running", st: &runtimeapi.ContainerStatus{State: runtimeapi.ContainerState_CONTAINER_RUNNING}, want: ""},
		{name: "cannot run", st: func() *runtimeapi.ContainerStatus {
			s := status(v1.TerminationMessageFallbackToLogsOnError, 128, emptyFile, logPath)
			s.Reason = "ContainerCannotRun"
			return s
		}(), want: ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := TerminationMessage(tc.st); got != tc.want {
				t.Errorf("got %q (%d bytes), want %q (%d bytes)", got, len(got), tc.want, len(tc.want))
			}
		})
	}
}

func TestTrimTerminationMessages(t *testing.T) {
	pod := &v1.Pod{Spec: v1.PodSpec{InitContainers: []v1.Container{{Name: "i"}}, Containers: []v1.Container{{Name: "a"}, {Name: "b"}}}}
	term := func(n int) v1.ContainerState {
		return v1.ContainerState{Terminated: &v1.ContainerStateTerminated{Message: strings.Repeat("m", n)}}
	}
	st := &v1.PodStatus{
		InitContainerStatuses: []v1.ContainerStatus{{State: term(5000)}},
		ContainerStatuses:     []v1.ContainerStatus{{State: term(100), LastTerminationState: term(4096)}, {State: v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: metav1.Now()}}}},
	}
	TrimTerminationMessages(pod, st)
	if got := len(st.InitContainerStatuses[0].State.Terminated.Message); got != 4096 {
		t.Errorf("init message %d bytes, want 4096", got)
	}
	if got := len(st.ContainerStatuses[0].State.Terminated.Message); got != 100 {
		t.Errorf("short message %d bytes, want 100", got)
	}
	if got := len(st.ContainerStatuses[0].LastTerminationState.Terminated.Message); got != 4096 {
		t.Errorf("last state message %d bytes, want 4096", got)
	}
	pod.Spec.Containers = append(pod.Spec.Containers, v1.Container{Name: "c"}, v1.Container{Name: "d"})
	TrimTerminationMessages(pod, st)
	if got := len(st.InitContainerStatuses[0].State.Terminated.Message); got != MaxPodTerminationMessages/5 {
		t.Errorf("with five containers the share is %d, got %d", MaxPodTerminationMessages/5, got)
	}
}
