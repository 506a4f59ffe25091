package runtime

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// The kubelet's bounds on termination messages.
const (
	// MaxTerminationMessage is the most read from a container's
	// termination message file (its last bytes).
	MaxTerminationMessage = 4 * 1024
	// MaxPodTerminationMessages bounds all of a pod's messages together;
	// each container gets an even share.
	MaxPodTerminationMessages = 12 * 1024
	// maxLogMessage and maxLogMessageLines bound a message taken from
	// the end of the container's log.
	maxLogMessage      = 2 * 1024
	maxLogMessageLines = 80
	// logTailWindow is how much of the log's end is read to find them.
	logTailWindow = 64 * 1024
)

// reasonContainerCannotRun is the runtime's reason for a container that
// never ran: it has no logs worth reading.
const reasonContainerCannotRun = "ContainerCannotRun"

// TerminationMessage reads what an exited container left as its
// termination message: the file bound at its terminationMessagePath,
// or, under FallbackToLogsOnError, the end of its log when it failed and
// the file is empty. The path and policy come from the container's
// annotations, the file from its mounts, as after an agent restart.
func TerminationMessage(st *runtimeapi.ContainerStatus) string {
	if st == nil || st.GetState() != runtimeapi.ContainerState_CONTAINER_EXITED {
		return ""
	}
	path := st.GetAnnotations()[AnnotationTerminationMessagePath]
	fallback := st.GetAnnotations()[AnnotationTerminationMessagePolicy] == string(v1.TerminationMessageFallbackToLogsOnError) &&
		st.GetExitCode() != 0 && st.GetReason() != reasonContainerCannotRun
	msg, ok := "", false
	if path != "" {
		for _, m := range st.GetMounts() {
			if m.GetContainerPath() != path {
				continue
			}
			data, err := readTail(m.GetHostPath(), MaxTerminationMessage)
			switch {
			case errors.Is(err, os.ErrNotExist):
			case err != nil:
				return fmt.Sprintf("Error on reading termination log %s: %v", m.GetHostPath(), err)
			default:
				msg, ok = string(data), true
			}
			break
		}
	}
	if !fallback || (ok && msg != "") {
		return msg
	}
	logMsg, err := lastLogLines(st.GetLogPath())
	if err != nil {
		return fmt.Sprintf("Error on reading termination message from logs: %v", err)
	}
	return logMsg
}

// readTail reads at most the last max bytes of a file.
func readTail(path string, max int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if off := info.Size() - max; off > 0 {
		if _, err := f.Seek(off, io.SeekStart); err != nil {
			return nil, err
		}
	}
	return io.ReadAll(io.LimitReader(f, max))
}

// lastLogLines is the end of a container's CRI log: its last 80 entries,
// at most the last 2 KiB of their text.
func lastLogLines(path string) (string, error) {
	if path == "" {
		return "", errors.New("the container has no log path")
	}
	data, err := readTail(filepath.Clean(path), logTailWindow)
	if err != nil {
		return "", err
	}
	lines := bytes.Split(bytes.TrimSuffix(data, []byte("\n")), []byte("\n"))
	if len(data) == logTailWindow && len(lines) > 1 {
		lines = lines[1:] // the first may be cut
	}
	if len(lines) > maxLogMessageLines {
		lines = lines[len(lines)-maxLogMessageLines:]
	}
	var out []byte
	for _, l := range lines {
		text, full, ok := parseCRILogLine(l)
		if !ok {
			continue
		}
		out = append(out, text...)
		if full {
			out = append(out, '\n')
		}
	}
	if len(out) > maxLogMessage {
		out = out[len(out)-maxLogMessage:]
	}
	return string(out), nil
}

// parseCRILogLine splits "<time> <stream> <P|F> <text>"; full is false
// for a partial line the runtime split.
func parseCRILogLine(l []byte) (text []byte, full, ok bool) {
	fields := bytes.SplitN(l, []byte(" "), 4)
	if len(fields) < 3 {
		return nil, false, false
	}
	if len(fields) == 4 {
		text = fields[3]
	}
	return text, string(fields[2]) != "P", true
}

// TrimTerminationMessages bounds the messages of a pod's terminated
// states so that together they fit MaxPodTerminationMessages, giving each
// of its containers an even share.
func TrimTerminationMessages(pod *v1.Pod, st *v1.PodStatus) {
	n := len(pod.Spec.Containers) + len(pod.Spec.InitContainers) + len(pod.Spec.EphemeralContainers)
	if n == 0 {
		return
	}
	share := MaxPodTerminationMessages / n
	trim := func(s *v1.ContainerState) {
		if t := s.Terminated; t != nil && len(t.Message) > share {
			t.Message = t.Message[:share]
		}
	}
	for _, list := range [][]v1.ContainerStatus{st.InitContainerStatuses, st.ContainerStatuses, st.EphemeralContainerStatuses} {
		for i := range list {
			trim(&list[i].State)
			trim(&list[i].LastTerminationState)
		}
	}
}
