package server

import (
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

// logOptions are the query options of /containerLogs, checked.
type logOptions struct {
	since      time.Time // zero: from the start
	tail       int64     // < 0: all lines
	limitBytes int64     // < 0: no limit
	timestamps bool
	follow     bool
	stdout     bool
	stderr     bool
}

// logReader writes one container's log to out as the options ask.
type logReader struct {
	opts logOptions
	// running reports whether the container may still write: following
	// stops at the end of the file once it says false.
	running func(ctx context.Context) bool
	// flush pushes what was written to the client; called before waiting.
	flush func()
	// pollInterval is how often a followed file is checked for new lines;
	// statusInterval how often the container's state is checked.
	pollInterval   time.Duration
	statusInterval time.Duration
}

// lineState is where a stream is within a logical line made of partials.
type lineState struct {
	inLine  bool // a partial was seen and its final part not yet
	include bool // the logical line being read is written
}

// logWriter applies the options to entries, in order.
type logWriter struct {
	opts    logOptions
	out     io.Writer
	skip    int64 // logical lines still to leave out (tail)
	counted int64 // logical lines that passed the filters
	streams map[string]*lineState
}

func newLogWriter(opts logOptions, out io.Writer, skip int64) *logWriter {
	return &logWriter{opts: opts, out: out, skip: skip, streams: map[string]*lineState{
		streamStdout: {}, streamStderr: {},
	}}
}

// write handles one entry. A logical line is judged by its first part: the
// since filter, the tail count and the time stamp all apply to it whole.
func (w *logWriter) write(e logEntry) error {
	st := w.streams[e.stream]
	first := !st.inLine
	st.inLine = e.partial
	if first {
		st.include = (e.stream == streamStdout && w.opts.stdout || e.stream == streamStderr && w.opts.stderr) &&
			(w.opts.since.IsZero() || !e.ts.Before(w.opts.since))
		if st.include {
			w.counted++
			if w.skip > 0 {
				w.skip--
				st.include = false
			}
		}
	}
	if !st.include || w.out == nil {
		return nil
	}
	if first && w.opts.timestamps {
		if _, err := io.WriteString(w.out, e.ts.Format(time.RFC3339Nano)+" "); err != nil {
			return err
		}
	}
	if _, err := w.out.Write(e.content); err != nil {
		return err
	}
	if !e.partial {
		if _, err := w.out.Write([]byte{'\n'}); err != nil {
			return err
		}
	}
	return nil
}

func (w *logWriter) line(raw []byte) error {
	e, err := parseCRILogLine(raw)
	if err != nil {
		// A damaged line (a crash mid-write) must not hide the rest.
		return nil
	}
	return w.write(e)
}

// read writes the log whose current file is path. Rotated files are read
// first, oldest first. It returns when the log is written, the byte limit
// is reached, or, when following, the container has stopped or ctx ends.
func (lr *logReader) read(ctx context.Context, path string, out io.Writer) error {
	files, err := logFiles(path)
	if err != nil {
		return err
	}
	var skip int64
	if lr.opts.tail >= 0 {
		counter := newLogWriter(lr.opts, nil, 0)
		for _, f := range files {
			if err := readWholeFile(f, counter); err != nil {
				return err
			}
		}
		skip = max(0, counter.counted-lr.opts.tail)
	}
	w := newLogWriter(lr.opts, &limitWriter{w: out, remaining: lr.opts.limitBytes}, skip)
	err = lr.readAll(ctx, files, w)
	if errors.Is(err, errLimitReached) {
		return nil
	}
	return err
}

func (lr *logReader) readAll(ctx context.Context, files []string, w *logWriter) error {
	for _, f := range files[:len(files)-1] {
		if err := readWholeFile(f, w); err != nil {
			return err
		}
	}
	current := files[len(files)-1]
	if !lr.opts.follow {
		return readWholeFile(current, w)
	}
	return lr.follow(ctx, current, w)
}

// readWholeFile writes every line of a file, gzip-compressed or not. A file
// that vanished (rotation compressed or removed it) is skipped.
func readWholeFile(path string, w *logWriter) error {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("open log: %w", err)
	}
	defer f.Close()
	var r io.Reader = f
	if strings.HasSuffix(path, ".gz") {
		gz, err := gzip.NewReader(f)
		if err != nil {
			return fmt.Errorf("open compressed log %s: %w", path, err)
		}
		defer gz.Close()
		r = gz
	}
	lines := newLineReader(r)
	if err := drain(lines, w); err != nil {
		return err
	}
	if len(lines.pending) > 0 {
		return w.line(lines.pending)
	}
	return nil
}

// drain writes the complete lines available now.
func drain(lines *lineReader, w *logWriter) error {
	for {
		line, err := lines.next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read log: %w", err)
		}
		if err := w.line(line); err != nil {
			return err
		}
	}
}

// follow reads path and waits for more until the container stops or ctx
// ends. When the file is rotated away it finishes the old one and goes on
// with the new file at path.
func (lr *logReader) follow(ctx context.Context, path string, w *logWriter) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("open log: %w", err)
	}
	defer func() { f.Close() }()
	lines := newLineReader(f)
	lastStatus := time.Time{}
	for {
		if err := drain(lines, w); err != nil {
			return err
		}
		if lr.flush != nil {
			lr.flush()
		}
		if next, ok := rotatedAway(f, path); ok {
			// The runtime writes to the old file until it reopens the log,
			// which creates the new one: read the old to its end once more.
			if err := drain(lines, w); err != nil {
				next.Close()
				return err
			}
			f.Close()
			f, lines = next, newLineReader(next)
			continue
		}
		if time.Since(lastStatus) >= lr.statusInterval {
			lastStatus = time.Now()
			if !lr.running(ctx) {
				if err := drain(lines, w); err != nil {
					return err
				}
				if len(lines.pending) > 0 {
					return w.line(lines.pending)
				}
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(lr.pollInterval):
		}
	}
}

// rotatedAway opens the file now at path when it is not f.
func rotatedAway(f *os.File, path string) (*os.File, bool) {
	cur, err := f.Stat()
	if err != nil {
		return nil, false
	}
	st, err := os.Stat(path)
	if err != nil || os.SameFile(cur, st) {
		return nil, false
	}
	next, err := os.Open(path)
	if err != nil {
		return nil, false
	}
	return next, true
}
