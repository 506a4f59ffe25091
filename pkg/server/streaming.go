package server

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// streamOptions are the standard streams a client asks for.
type streamOptions struct {
	stdin, stdout, stderr, tty bool
}

// parseStreamOptions reads the exec/attach query ("1" or "true" turns a
// stream on). With a TTY there is no separate stderr.
func parseStreamOptions(q url.Values) (streamOptions, error) {
	flag := func(name string) (bool, error) {
		switch v := q.Get(name); v {
		case "", "0", "false":
			return false, nil
		case "1", "true":
			return true, nil
		default:
			return false, errorf(http.StatusBadRequest, "invalid %s %q: want 1 or 0", name, v)
		}
	}
	var o streamOptions
	var err error
	if o.stdin, err = flag(v1.ExecStdinParam); err != nil {
		return o, err
	}
	if o.stdout, err = flag(v1.ExecStdoutParam); err != nil {
		return o, err
	}
	if o.stderr, err = flag(v1.ExecStderrParam); err != nil {
		return o, err
	}
	if o.tty, err = flag(v1.ExecTTYParam); err != nil {
		return o, err
	}
	if o.tty {
		o.stderr = false
	}
	if !o.stdin && !o.stdout && !o.stderr {
		return o, errorf(http.StatusBadRequest, "at least one of %s, %s or %s must be set", v1.ExecStdinParam, v1.ExecStdoutParam, v1.ExecStderrParam)
	}
	return o, nil
}

// streamTarget resolves the running container a stream request names.
func (a *api) streamTarget(r *http.Request) (*runtimeapi.Container, error) {
	ref, err := podRefFrom(r)
	if err != nil {
		return nil, err
	}
	name, err := containerNameFrom(r)
	if err != nil {
		return nil, err
	}
	pod, err := a.findPod(ref)
	if err != nil {
		return nil, err
	}
	return a.runningContainer(r.Context(), pod, name)
}

// exec answers /exec: the runtime prepares the session and the upgraded
// connection is relayed to its streaming server.
func (a *api) exec(w http.ResponseWriter, r *http.Request) {
	a.serveStream(w, r, func(ctx context.Context) (string, error) {
		opts, err := parseStreamOptions(r.URL.Query())
		if err != nil {
			return "", err
		}
		cmd := r.URL.Query()[v1.ExecCommandParam]
		if len(cmd) == 0 || cmd[0] == "" {
			return "", errorf(http.StatusBadRequest, "%s is required", v1.ExecCommandParam)
		}
		c, err := a.streamTarget(r)
		if err != nil {
			return "", err
		}
		resp, err := a.runtime.Exec(ctx, &runtimeapi.ExecRequest{
			ContainerId: c.GetId(), Cmd: cmd, Tty: opts.tty, Stdin: opts.stdin, Stdout: opts.stdout, Stderr: opts.stderr,
		})
		if err != nil {
			return "", runtimeError("exec in container", err)
		}
		return resp.GetUrl(), nil
	})
}

// attach answers /attach, as exec but to the container's own streams.
func (a *api) attach(w http.ResponseWriter, r *http.Request) {
	a.serveStream(w, r, func(ctx context.Context) (string, error) {
		opts, err := parseStreamOptions(r.URL.Query())
		if err != nil {
			return "", err
		}
		c, err := a.streamTarget(r)
		if err != nil {
			return "", err
		}
		resp, err := a.runtime.Attach(ctx, &runtimeapi.AttachRequest{
			ContainerId: c.GetId(), Tty: opts.tty, Stdin: opts.stdin, Stdout: opts.stdout, Stderr: opts.stderr,
		})
		if err != nil {
			return "", runtimeError("attach to container", err)
		}
		return resp.GetUrl(), nil
	})
}

// portForward answers /portForward. SPDY clients name ports per stream;
// WebSocket clients name them in the query.
func (a *api) portForward(w http.ResponseWriter, r *http.Request) {
	a.serveStream(w, r, func(ctx context.Context) (string, error) {
		var ports []int32
		for _, p := range r.URL.Query()[v1.PortHeader] {
			n, err := strconv.ParseUint(p, 10, 16)
			if err != nil || n == 0 {
				return "", errorf(http.StatusBadRequest, "invalid port %q: want 1-65535", p)
			}
			ports = append(ports, int32(n))
		}
		ref, err := podRefFrom(r)
		if err != nil {
			return "", err
		}
		pod, err := a.findPod(ref)
		if err != nil {
			return "", err
		}
		sb, err := a.readySandbox(ctx, pod)
		if err != nil {
			return "", err
		}
		resp, err := a.runtime.PortForward(ctx, &runtimeapi.PortForwardRequest{PodSandboxId: sb.GetId(), Port: ports})
		if err != nil {
			return "", runtimeError("port-forward to pod", err)
		}
		return resp.GetUrl(), nil
	})
}

// serveStream checks that the request is an upgrade, asks prepare for the
// runtime's stream URL and relays the connection there.
func (a *api) serveStream(w http.ResponseWriter, r *http.Request, prepare func(ctx context.Context) (string, error)) {
	if !isUpgradeRequest(r) {
		writeError(w, r, errorf(http.StatusBadRequest, "%s needs a SPDY or WebSocket upgrade request", r.URL.Path))
		return
	}
	release, err := a.streams.acquire(userName(r.Context()))
	if err != nil {
		writeError(w, r, err)
		return
	}
	defer release()
	ctx, cancel := context.WithTimeout(r.Context(), a.callTimeout)
	location, err := prepare(ctx)
	cancel()
	if err != nil {
		writeError(w, r, err)
		return
	}
	a.relay(w, r, location)
}

// run answers POST /run: a command run to completion (CRI ExecSync) whose
// output, stdout then stderr, is the response body.
func (a *api) run(w http.ResponseWriter, r *http.Request) {
	cmd := strings.Fields(r.URL.Query().Get("cmd"))
	if len(cmd) == 0 {
		writeError(w, r, errorf(http.StatusBadRequest, "cmd is required"))
		return
	}
	c, err := a.streamTarget(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	resp, err := a.runtime.ExecSync(r.Context(), &runtimeapi.ExecSyncRequest{ContainerId: c.GetId(), Cmd: cmd})
	if err != nil {
		writeError(w, r, runtimeError("run in container", err))
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	if code := resp.GetExitCode(); code != 0 {
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = fmt.Fprintf(w, "command %q exited with code %d\n", strings.Join(cmd, " "), code)
	}
	_, _ = w.Write(resp.GetStdout())
	_, _ = w.Write(resp.GetStderr())
}

// runtimeError keeps the runtime's NotFound a 404.
func runtimeError(op string, err error) error {
	switch status.Code(err) {
	case codes.NotFound:
		return errorf(http.StatusNotFound, "%s: %w", op, err)
	case codes.InvalidArgument:
		return errorf(http.StatusBadRequest, "%s: %w", op, err)
	default:
		return errorf(http.StatusInternalServerError, "%s: %w", op, err)
	}
}
