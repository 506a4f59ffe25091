package server

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// The CRI log format: one line per write, "<RFC3339Nano> <stream> <tags>
// <content>\n". The first tag is P for a line the runtime split (the rest
// follows in later lines) or F for the final part of a line.
const (
	streamStdout = "stdout"
	streamStderr = "stderr"
	tagPartial   = "P"
)

// rotatedSuffixFormat is the time stamp log rotation appends to a container
// log file, optionally followed by ".gz".
const rotatedSuffixFormat = "20060102-150405"

// maxLogLineSize bounds one raw line held in memory; runtimes split lines
// far below this (containerd at 16 KiB), so only a damaged file reaches it.
const maxLogLineSize = 1 << 20

// logEntry is one parsed line of a CRI log.
type logEntry struct {
	ts      time.Time
	stream  string
	partial bool
	content []byte
}

var errBadLogLine = errors.New("malformed CRI log line")

// parseCRILogLine parses one line without its newline.
func parseCRILogLine(line []byte) (logEntry, error) {
	var e logEntry
	tsField, rest, ok := bytes.Cut(line, []byte{' '})
	if !ok {
		return e, fmt.Errorf("%w: no time stamp", errBadLogLine)
	}
	ts, err := time.Parse(time.RFC3339Nano, string(tsField))
	if err != nil {
		return e, fmt.Errorf("%w: time stamp %q: %w", errBadLogLine, tsField, err)
	}
	e.ts = ts
	stream, rest, ok := bytes.Cut(rest, []byte{' '})
	if !ok {
		return e, fmt.Errorf("%w: no tags", errBadLogLine)
	}
	switch string(stream) {
	case streamStdout, streamStderr:
		e.stream = string(stream)
	default:
		return e, fmt.Errorf("%w: unknown stream %q", errBadLogLine, stream)
	}
	tags, content, _ := bytes.Cut(rest, []byte{' '})
	first, _, _ := bytes.Cut(tags, []byte{':'})
	e.partial = string(first) == tagPartial
	e.content = content
	return e, nil
}

// logFiles returns the files of one container log, oldest first: the
// rotated ones (<path>.<time stamp>[.gz]) and then path itself. Only names
// derived from path are considered; path itself comes from the runtime.
func logFiles(path string) ([]string, error) {
	dir, base := filepath.Split(path)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("list log directory: %w", err)
	}
	var rotated []string
	for _, e := range entries {
		name := e.Name()
		suffix, ok := strings.CutPrefix(name, base+".")
		if !ok || !e.Type().IsRegular() {
			continue
		}
		suffix = strings.TrimSuffix(suffix, ".gz")
		if _, err := time.Parse(rotatedSuffixFormat, suffix); err != nil {
			continue
		}
		rotated = append(rotated, name)
	}
	// The time stamp sorts as text; an uncompressed twin of a .gz (mid
	// compression) sorts first and the .gz is dropped below.
	sort.Strings(rotated)
	files := make([]string, 0, len(rotated)+1)
	for i, name := range rotated {
		if i > 0 && name == rotated[i-1]+".gz" {
			continue
		}
		files = append(files, filepath.Join(dir, name))
	}
	return append(files, path), nil
}

// lineReader reads whole lines from a file that may still be written: an
// incomplete last line is kept until its newline arrives.
type lineReader struct {
	r        *bufio.Reader
	pending  []byte
	overflow bool
}

func newLineReader(r io.Reader) *lineReader {
	return &lineReader{r: bufio.NewReaderSize(r, 64<<10)}
}

// next returns the next complete line without its newline, or io.EOF when
// none is complete yet.
func (l *lineReader) next() ([]byte, error) {
	for {
		chunk, err := l.r.ReadSlice('\n')
		if !l.overflow {
			room := maxLogLineSize - len(l.pending)
			if len(chunk) > room {
				chunk = chunk[:room]
				l.overflow = true
			}
			l.pending = append(l.pending, chunk...)
		}
		switch {
		case err == nil:
			line := bytes.TrimSuffix(l.pending, []byte{'\n'})
			l.pending = l.pending[:0]
			l.overflow = false
			return line, nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		default:
			return nil, err
		}
	}
}

// limitWriter stops after a number of bytes, cutting the last write short.
type limitWriter struct {
	w         io.Writer
	remaining int64 // < 0: no limit
}

var errLimitReached = errors.New("log byte limit reached")

func (l *limitWriter) Write(p []byte) (int, error) {
	if l.remaining < 0 {
		return l.w.Write(p)
	}
	if l.remaining == 0 {
		return 0, errLimitReached
	}
	cut := false
	if int64(len(p)) > l.remaining {
		p = p[:l.remaining]
		cut = true
	}
	n, err := l.w.Write(p)
	l.remaining -= int64(n)
	if err == nil && cut {
		err = errLimitReached
	}
	return n, err
}
