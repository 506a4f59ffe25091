package server

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"strconv"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
)

// Intervals of a followed log: new lines show within logPollInterval; a
// stopped container ends the stream within logStatusInterval.
const (
	logPollInterval   = 250 * time.Millisecond
	logStatusInterval = time.Second
)

// parseLogOptions reads the PodLogOptions query of /containerLogs; a bad
// value is a 400 naming the parameter.
func parseLogOptions(q url.Values, now time.Time) (logOptions, bool, error) {
	opts := logOptions{tail: -1, limitBytes: -1, stdout: true, stderr: true}
	boolParam := func(name string) (bool, error) {
		v := q.Get(name)
		if v == "" {
			return false, nil
		}
		b, err := strconv.ParseBool(v)
		if err != nil {
			return false, errorf(http.StatusBadRequest, "invalid %s %q: want true or false", name, v)
		}
		return b, nil
	}
	intParam := func(name string, min int64) (int64, bool, error) {
		v := q.Get(name)
		if v == "" {
			return 0, false, nil
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < min {
			return 0, false, errorf(http.StatusBadRequest, "invalid %s %q: want an integer of at least %d", name, v, min)
		}
		return n, true, nil
	}
	var err error
	if opts.follow, err = boolParam("follow"); err != nil {
		return opts, false, err
	}
	previous, err := boolParam("previous")
	if err != nil {
		return opts, false, err
	}
	if opts.timestamps, err = boolParam("timestamps"); err != nil {
		return opts, false, err
	}
	// "tail" is the old name of tailLines; "all" means no limit.
	if q.Get("tailLines") == "" && q.Get("tail") != "" && q.Get("tail") != "all" {
		q = cloneWith(q, "tailLines", q.Get("tail"))
	}
	if n, ok, err := intParam("tailLines", 0); err != nil {
		return opts, false, err
	} else if ok {
		opts.tail = n
	}
	if n, ok, err := intParam("limitBytes", 1); err != nil {
		return opts, false, err
	} else if ok {
		opts.limitBytes = n
	}
	secs, hasSecs, err := intParam("sinceSeconds", 1)
	if err != nil {
		return opts, false, err
	}
	if v := q.Get("sinceTime"); v != "" {
		if hasSecs {
			return opts, false, errorf(http.StatusBadRequest, "sinceTime and sinceSeconds cannot both be set")
		}
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			return opts, false, errorf(http.StatusBadRequest, "invalid sinceTime %q: want an RFC 3339 time", v)
		}
		opts.since = t
	}
	if hasSecs {
		opts.since = now.Add(-time.Duration(secs) * time.Second)
	}
	switch s := q.Get("stream"); s {
	case "", "All":
	case "Stdout":
		opts.stderr = false
	case "Stderr":
		opts.stdout = false
	default:
		return opts, false, errorf(http.StatusBadRequest, "invalid stream %q: want All, Stdout or Stderr", s)
	}
	return opts, previous, nil
}

func cloneWith(q url.Values, k, v string) url.Values {
	c := url.Values{}
	for key, vals := range q {
		c[key] = vals
	}
	c.Set(k, v)
	return c
}

// getContainerLogs answers /containerLogs/{namespace}/{pod}/{container}.
func (a *api) getContainerLogs(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	opts, previous, err := parseLogOptions(r.URL.Query(), time.Now())
	if err != nil {
		writeError(w, r, err)
		return
	}
	c, logPath, err := a.logTarget(ctx, r, previous)
	if err != nil {
		writeError(w, r, err)
		return
	}
	if opts.follow {
		release, err := a.follows.acquire(userName(ctx))
		if err != nil {
			writeError(w, r, err)
			return
		}
		defer release()
	}
	rc := http.NewResponseController(w)
	sent := &sentWriter{w: w, progress: writeProgress(rc, a.idleTimeout)}
	bw := bufio.NewWriterSize(sent, 32<<10)
	reader := &logReader{
		opts:    opts,
		running: func(ctx context.Context) bool { return a.containerRunning(ctx, c.GetId()) },
		flush: func() {
			_ = bw.Flush()
			sent.progress()
			_ = rc.Flush()
		},
		pollInterval:   logPollInterval,
		statusInterval: logStatusInterval,
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	if err := reader.read(ctx, logPath, bw); err != nil {
		if !sent.wrote {
			writeError(w, r, errorf(http.StatusInternalServerError, "read log of container %q: %w", r.PathValue("container"), err))
			return
		}
		// The status line is out: say what happened in the stream.
		klog.FromContext(ctx).Error(err, "Reading container log failed", "container", c.GetId(), "path", logPath)
		_, _ = fmt.Fprintf(bw, "\nerror reading the log: %v\n", err)
	}
	_ = bw.Flush()
}

// sentWriter records whether anything reached the client, and calls
// progress before each write.
type sentWriter struct {
	w        io.Writer
	wrote    bool
	progress func()
}

func (s *sentWriter) Write(p []byte) (int, error) {
	s.wrote = s.wrote || len(p) > 0
	s.progress()
	return s.w.Write(p)
}

// writeProgress returns what gives the next write to the client idle time
// to go through (no limit when idle is 0). A client that stops reading a log
// is cut after that long, as an idle exec stream is, instead of holding a
// request, a file and a goroutine forever; a followed log that merely has
// nothing new writes nothing and is not cut.
func writeProgress(rc *http.ResponseController, idle time.Duration) func() {
	if idle <= 0 {
		return func() {}
	}
	return func() { _ = rc.SetWriteDeadline(time.Now().Add(idle)) }
}

// logTarget finds the container a log request is for, and its log file as
// the runtime reports it. Only that file and its rotated siblings are read.
func (a *api) logTarget(ctx context.Context, r *http.Request, previous bool) (*runtimeapi.Container, string, error) {
	ref, err := podRefFrom(r)
	if err != nil {
		return nil, "", err
	}
	name, err := containerNameFrom(r)
	if err != nil {
		return nil, "", err
	}
	pod, err := a.findPod(ref)
	if err != nil {
		return nil, "", err
	}
	if err := checkContainerInSpec(pod, name); err != nil {
		return nil, "", err
	}
	attempts, err := a.containerAttempts(ctx, pod, name)
	if err != nil {
		return nil, "", err
	}
	latestRestarts := false
	if previous && len(attempts) > 0 && attempts[0].GetState() == runtimeapi.ContainerState_CONTAINER_EXITED {
		st, err := a.status(ctx, attempts[0].GetId())
		if err != nil {
			return nil, "", err
		}
		latestRestarts = willRestart(pod, name, st.GetExitCode())
	}
	c, err := pickAttempt(attempts, previous, latestRestarts, pod, name)
	if err != nil {
		return nil, "", err
	}
	st, err := a.status(ctx, c.GetId())
	if err != nil {
		return nil, "", err
	}
	logPath := st.GetLogPath()
	if logPath == "" || !filepath.IsAbs(logPath) {
		return nil, "", errorf(http.StatusNotFound, "container %q has no log file (runtime reported %q)", name, logPath)
	}
	return c, filepath.Clean(logPath), nil
}

func (a *api) status(ctx context.Context, id string) (*runtimeapi.ContainerStatus, error) {
	ctx, cancel := context.WithTimeout(ctx, a.callTimeout)
	defer cancel()
	resp, err := a.runtime.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id})
	if err != nil {
		return nil, runtimeError("container status", err)
	}
	return resp.GetStatus(), nil
}

// pickAttempt chooses the attempt a log request is for; attempts are newest
// first. The current one is the newest. The previous one is the last that
// terminated, as the pod's lastState shows it: the newest itself when it
// exited and waits for its restart (CrashLoopBackOff), else the one before.
// Its errors are the kubelet's words, which users and scripts look for.
func pickAttempt(attempts []*runtimeapi.Container, previous, latestRestarts bool, pod *v1.Pod, name string) (*runtimeapi.Container, error) {
	if len(attempts) == 0 {
		return nil, errorf(http.StatusBadRequest, "container %q in pod %q is waiting to start: %s", name, pod.Name, waitingReason(pod, name))
	}
	if !previous {
		return attempts[0], nil
	}
	if attempts[0].GetState() == runtimeapi.ContainerState_CONTAINER_EXITED && latestRestarts {
		return attempts[0], nil
	}
	if len(attempts) < 2 || attempts[1].GetState() != runtimeapi.ContainerState_CONTAINER_EXITED {
		return nil, errorf(http.StatusBadRequest, "previous terminated container %q in pod %q not found", name, pod.Name)
	}
	return attempts[1], nil
}

// waitingReason is why a container that has not been created waits, as the
// pod's last known status says (ErrImagePull, PodInitializing...), or
// ContainerCreating.
func waitingReason(pod *v1.Pod, name string) string {
	for _, list := range [][]v1.ContainerStatus{pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses, pod.Status.EphemeralContainerStatuses} {
		for _, cs := range list {
			if cs.Name == name && cs.State.Waiting != nil && cs.State.Waiting.Reason != "" {
				return cs.State.Waiting.Reason
			}
		}
	}
	return "ContainerCreating"
}

// willRestart reports whether a container that exited with exitCode is to
// be started again under the pod's and the container's restart policies.
func willRestart(pod *v1.Pod, name string, exitCode int32) bool {
	policy := pod.Spec.RestartPolicy
	for _, c := range pod.Spec.EphemeralContainers {
		if c.Name == name {
			return false // run once, never restarted
		}
	}
	for _, c := range pod.Spec.InitContainers {
		if c.Name != name {
			continue
		}
		if c.RestartPolicy != nil && *c.RestartPolicy == v1.ContainerRestartPolicyAlways {
			return true // a sidecar
		}
		return policy != v1.RestartPolicyNever && exitCode != 0
	}
	for _, c := range pod.Spec.Containers {
		if c.Name == name && c.RestartPolicy != nil {
			policy = v1.RestartPolicy(*c.RestartPolicy)
		}
	}
	switch policy {
	case v1.RestartPolicyNever:
		return false
	case v1.RestartPolicyOnFailure:
		return exitCode != 0
	default:
		return true
	}
}

// containerRunning reports whether the container may still write its log.
// An error counts as running for a while: a runtime restart must not cut
// every followed log.
func (a *api) containerRunning(ctx context.Context, id string) bool {
	ctx, cancel := context.WithTimeout(ctx, a.callTimeout)
	defer cancel()
	st, err := a.runtime.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id})
	if status.Code(err) == codes.NotFound {
		return false
	}
	if err != nil {
		return ctx.Err() == nil
	}
	s := st.GetStatus().GetState()
	return s == runtimeapi.ContainerState_CONTAINER_RUNNING || s == runtimeapi.ContainerState_CONTAINER_CREATED
}
