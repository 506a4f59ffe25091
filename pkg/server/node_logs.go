package server

import (
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"html"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path"
	"sort"
	"strings"

	"k8s.io/klog/v2"
)

// Defaults of the node log endpoint.
const (
	DefaultNodeLogDir = "/var/log"
	defaultJournalctl = "journalctl"
	nodeLogsPrefix    = "/logs/"
)

// nodeLogs serves /logs/: the files under the node's log directory and,
// with query on (enableSystemLogQuery; the NodeLogQuery gate is locked
// on), the ?query= form that reads a service's journal or log file.
type nodeLogs struct {
	dir   string
	query bool
	// journalctl is the command that reads the journal; a node without
	// one answers services from their log files.
	journalctl string
}

func (l *nodeLogs) serve(w http.ResponseWriter, r *http.Request) {
	rel := strings.TrimPrefix(r.URL.Path, nodeLogsPrefix)
	if !l.query {
		l.serveFile(w, r, rel)
		return
	}
	lq, errs := parseLogQuery(r.URL.Query())
	if len(errs) > 0 {
		http.Error(w, errs.ToAggregate().Error(), http.StatusBadRequest)
		return
	}
	if lq == nil {
		l.serveFile(w, r, rel)
		return
	}
	if rel != "" {
		http.Error(w, "path not allowed in query mode", http.StatusNotAcceptable)
		return
	}
	if errs := lq.validate(l.dir); len(errs) > 0 {
		http.Error(w, errs.ToAggregate().Error(), http.StatusNotAcceptable)
		return
	}
	if len(lq.files) == 1 {
		l.serveFile(w, r, strings.TrimPrefix(strings.ReplaceAll(lq.files[0], `\`, "/"), "/"))
		return
	}
	w.Header().Set("Content-Type", "text/plain;charset=UTF-8")
	var out io.Writer = w
	if r.Header.Get("Accept-Encoding") == "gzip" {
		w.Header().Set("Content-Encoding", "gzip")
		gz, _ := gzip.NewWriterLevel(w, gzip.BestSpeed) // the level is valid
		defer func() { _ = gz.Close() }()
		out = gz
	}
	ctx, cancel := queryContext(r.Context())
	defer cancel()
	l.copyServices(ctx, out, lq)
}

// copyServices writes the services' logs: those the journal knows from
// journalctl, the others from their log files. Failures are written into
// the answer, as the kubelet does: the status line is already out.
func (l *nodeLogs) copyServices(ctx context.Context, w io.Writer, lq *logQuery) {
	var journal, files []string
	units := l.journalUnits(ctx)
	for _, s := range lq.services {
		if strings.Contains(units, s+".service") {
			journal = append(journal, s)
		} else {
			files = append(files, s)
		}
	}
	if len(journal) > 0 {
		cmd := exec.CommandContext(ctx, l.journalctl, lq.journalArgs(journal)...)
		cmd.Stdout, cmd.Stderr = w, w
		if err := cmd.Run(); err != nil {
			var exitErr *exec.ExitError
			if !errors.As(err, &exitErr) && (lq.boot == nil || *lq.boot == 0) {
				fmt.Fprintf(w, "\nerror: journal output not available\n")
			}
		}
	}
	if len(files) > 0 && !lq.empty() {
		fmt.Fprintf(w, "\noptions present and query resolved to log files for %v\ntry without specifying options\n", files)
		return
	}
	for _, s := range files {
		if ctx.Err() != nil {
			fmt.Fprintf(w, "\ncontext error: %v\n", ctx.Err())
			return
		}
		l.copyServiceFile(ctx, w, s)
	}
}

// journalUnits lists the units the journal has entries of; "" when there
// is no journal.
func (l *nodeLogs) journalUnits(ctx context.Context) string {
	out, err := exec.CommandContext(ctx, l.journalctl, "--field", "_SYSTEMD_UNIT").CombinedOutput()
	if err != nil {
		return ""
	}
	return string(out)
}

// copyServiceFile writes a service's log file: the first of <dir>/s,
// <dir>/s.log and <dir>/s/s.log that is a file.
func (l *nodeLogs) copyServiceFile(ctx context.Context, w io.Writer, service string) {
	root, err := os.OpenRoot(l.dir)
	if err != nil {
		fmt.Fprintf(w, "\nerror getting log for %s: %v\n", service, err)
		return
	}
	defer func() { _ = root.Close() }()
	for _, name := range []string{service, service + ".log", service + "/" + service + ".log"} {
		err = copyLogFile(ctx, w, root, name)
		if !errors.Is(err, fs.ErrNotExist) {
			break
		}
	}
	switch {
	case errors.Is(err, fs.ErrNotExist):
		fmt.Fprintf(w, "\nlog not found for %s\n", service)
	case err != nil:
		fmt.Fprintf(w, "\nerror getting log for %s: %v\n", service, err)
	}
}

func copyLogFile(ctx context.Context, w io.Writer, root *os.Root, name string) error {
	f, err := root.Open(name)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if fi.IsDir() {
		return fs.ErrNotExist
	}
	_, err = io.Copy(w, ctxReader{ctx: ctx, r: f})
	return err
}

// ctxReader stops a copy when its context ends.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// serveFile answers a file below the log directory, or a listing of a
// directory. Nothing outside the directory is reachable, symbolic links
// included, and no redirect is ever sent (the apiserver's proxy must not
// be asked to follow one): a directory asked for without its trailing
// slash is listed with links that still resolve.
func (l *nodeLogs) serveFile(w http.ResponseWriter, r *http.Request, rel string) {
	root, err := os.OpenRoot(l.dir)
	if err != nil {
		writeError(w, r, errorf(http.StatusInternalServerError, "open log directory: %w", err))
		return
	}
	defer func() { _ = root.Close() }()
	name := strings.TrimSuffix(rel, "/")
	if name == "" {
		name = "."
	}
	f, err := root.Open(name)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) {
			http.NotFound(w, r)
			return
		}
		klog.FromContext(r.Context()).V(2).Info("Opening a node log failed", "path", rel, "err", err.Error())
		http.NotFound(w, r)
		return
	}
	defer func() { _ = f.Close() }()
	fi, err := f.Stat()
	if err != nil {
		writeError(w, r, errorf(http.StatusInternalServerError, "stat %s: %w", rel, err))
		return
	}
	if !fi.IsDir() {
		if strings.HasSuffix(rel, "/") {
			http.NotFound(w, r)
			return
		}
		http.ServeContent(w, r, fi.Name(), fi.ModTime(), f)
		return
	}
	entries, err := f.ReadDir(-1)
	if err != nil {
		writeError(w, r, errorf(http.StatusInternalServerError, "list %s: %w", rel, err))
		return
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].Name() < entries[j].Name() })
	base := ""
	if rel != "" && !strings.HasSuffix(rel, "/") {
		base = path.Base(rel) + "/"
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	var b strings.Builder
	b.WriteString("<!doctype html>\n<meta name=\"viewport\" content=\"width=device-width\">\n<pre>\n")
	for _, e := range entries {
		n := e.Name()
		if e.IsDir() {
			n += "/"
		}
		u := url.URL{Path: base + n}
		fmt.Fprintf(&b, "<a href=\"%s\">%s</a>\n", html.EscapeString(u.String()), html.EscapeString(n))
	}
	b.WriteString("</pre>\n")
	_, _ = io.WriteString(w, b.String())
}
