// Package logs rotates the CRI log files of running containers, as the
// kubelet's container log manager does: a file over containerLogMaxSize is
// renamed to <log>.<timestamp>, the runtime reopens the log, older rotated
// files are gzipped, and no more than containerLogMaxFiles files are kept
// per container (the live one included).
package logs

import (
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// timestampFormat suffixes a rotated file, as the kubelet names them.
const timestampFormat = "20060102-150405"

const (
	compressSuffix = ".gz"
	tmpSuffix      = ".tmp"
)

// Runtime is what rotation needs of the container runtime.
type Runtime interface {
	ListContainers(ctx context.Context, filter *runtimeapi.ContainerFilter) ([]*runtimeapi.Container, error)
	ContainerStatus(ctx context.Context, containerID string, verbose bool) (*runtimeapi.ContainerStatusResponse, error)
	ReopenContainerLog(ctx context.Context, containerID string) error
}

// Config configures a Rotator.
type Config struct {
	Runtime Runtime
	// MaxSize is containerLogMaxSize in bytes; a live log larger than this
	// is rotated. Required (> 0).
	MaxSize int64
	// MaxFiles is containerLogMaxFiles: files kept per container, the live
	// one included. At least 2.
	MaxFiles int
	// Interval is containerLogMonitorInterval. Defaults to 10 s.
	Interval time.Duration
	// Clock names rotated files and ticks. Defaults to the real clock.
	Clock clock.WithTicker
	// Running, when set, lists the running containers' IDs as the agent
	// already knows them (its PLEG's cache), so that a round asks the
	// runtime nothing unless a container is new or its log must be
	// reopened; ok is false until it knows (the first relist), and the
	// round then lists the runtime's containers. Nil: every round lists
	// them.
	Running func() (ids []string, ok bool)
}

// Rotator rotates the logs of running containers.
type Rotator struct {
	cfg Config
	// mu serializes the rounds; known is what they learnt of each running
	// container.
	mu    sync.Mutex
	known map[string]*containerLog
}

// containerLog is a running container's log as the rounds know it: its
// path, asked of the runtime once (it never changes), and whether its
// rotated files are to be tidied (pruned and compressed): on first sight,
// since a cut rotation may have left some, and the round after each
// rotation. The other rounds look at the live file's size alone, so that a
// node of many quiet containers costs a stat each per round, not a
// ContainerStatus and a directory read.
type containerLog struct {
	path string
	tidy bool
}

// New validates cfg and returns a Rotator.
func New(cfg Config) (*Rotator, error) {
	if cfg.Runtime == nil {
		return nil, errors.New("logs: Runtime is required")
	}
	if cfg.MaxSize <= 0 {
		return nil, fmt.Errorf("logs: MaxSize must be positive, got %d", cfg.MaxSize)
	}
	if cfg.MaxFiles < 2 {
		return nil, fmt.Errorf("logs: MaxFiles must be at least 2, got %d", cfg.MaxFiles)
	}
	if cfg.Interval <= 0 {
		cfg.Interval = 10 * time.Second
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	return &Rotator{cfg: cfg}, nil
}

// Run rotates every Interval until ctx ends.
func (r *Rotator) Run(ctx context.Context) error {
	t := r.cfg.Clock.NewTicker(r.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C():
		}
		r.RotateAll(ctx)
	}
}

// RotateAll looks at every running container once. A container whose log
// cannot be rotated is logged and left for the next round.
func (r *Rotator) RotateAll(ctx context.Context) {
	logger := klog.FromContext(ctx)
	ids, err := r.running(ctx)
	if err != nil {
		logger.Error(err, "Listing containers for log rotation failed")
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	known := make(map[string]*containerLog, len(ids))
	for _, id := range ids {
		cl, ok := r.known[id]
		if !ok {
			resp, err := r.cfg.Runtime.ContainerStatus(ctx, id, false)
			if err != nil {
				logger.Info("Container log rotation failed", "containerID", id, "err", err.Error())
				continue
			}
			st := resp.GetStatus()
			if st.GetState() != runtimeapi.ContainerState_CONTAINER_RUNNING {
				continue
			}
			cl = &containerLog{path: st.GetLogPath(), tidy: true}
		}
		known[id] = cl
		if cl.path == "" {
			continue
		}
		if err := r.rotateContainer(ctx, id, cl); err != nil {
			logger.Info("Container log rotation failed", "containerID", id, "err", err.Error())
		}
	}
	r.known = known // containers no longer running are forgotten
}

// running is the IDs of the running containers: Config.Running's, or else
// the runtime's list.
func (r *Rotator) running(ctx context.Context) ([]string, error) {
	if r.cfg.Running != nil {
		if ids, ok := r.cfg.Running(); ok {
			return ids, nil
		}
	}
	filter := &runtimeapi.ContainerFilter{State: &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING}}
	containers, err := r.cfg.Runtime.ListContainers(ctx, filter)
	if err != nil {
		return nil, err
	}
	ids := make([]string, len(containers))
	for i, c := range containers {
		ids[i] = c.Id
	}
	return ids, nil
}

func (r *Rotator) rotateContainer(ctx context.Context, id string, cl *containerLog) error {
	path := cl.path
	fi, err := os.Stat(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			// The runtime may have lost its file (a failed reopen): ask again.
			return r.cfg.Runtime.ReopenContainerLog(ctx, id)
		}
		return err
	}
	big := fi.Size() > r.cfg.MaxSize
	if !big && !cl.tidy {
		return nil
	}
	rotated, err := r.prune(path)
	if err != nil {
		return err
	}
	// A file that cannot be compressed (the disk is full) stays as it is, and
	// the live log is rotated all the same: it must not grow without end.
	compressErr := compressOlder(rotated)
	cl.tidy = compressErr != nil
	if !big {
		return compressErr
	}
	next := fmt.Sprintf("%s.%s", path, r.cfg.Clock.Now().Format(timestampFormat))
	if err := os.Rename(path, next); err != nil {
		return errors.Join(compressErr, fmt.Errorf("rotate %s: %w", path, err))
	}
	if err := r.cfg.Runtime.ReopenContainerLog(ctx, id); err != nil {
		// Put it back so the container keeps writing where users read.
		if rerr := os.Rename(next, path); rerr != nil {
			return errors.Join(compressErr, err, fmt.Errorf("restore %s: %w", path, rerr))
		}
		return errors.Join(compressErr, err)
	}
	klog.FromContext(ctx).V(4).Info("Rotated container log", "containerID", id, "path", path, "size", fi.Size())
	cl.tidy = true // the file rotated now is compressed, and the oldest pruned, next round
	return compressErr
}

// prune removes what a cut rotation left and the oldest rotated files, so
// that at most MaxFiles-2 stay: with the file rotated next and the live
// one, MaxFiles in all. It returns the rotated files left, oldest first.
func (r *Rotator) prune(path string) ([]string, error) {
	matches, err := filepath.Glob(globQuote(path) + ".*")
	if err != nil {
		return nil, err
	}
	var rotated []string
	for _, m := range matches {
		switch {
		case strings.HasSuffix(m, tmpSuffix):
			if err := os.Remove(m); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return nil, err
			}
		default:
			rotated = append(rotated, m)
		}
	}
	// Timestamps sort as strings; "x.gz" and "x" of the same stamp count once.
	sort.Slice(rotated, func(i, j int) bool { return stamp(rotated[i]) < stamp(rotated[j]) })
	keep := r.cfg.MaxFiles - 2
	for len(rotated) > keep {
		if err := os.Remove(rotated[0]); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		rotated = rotated[1:]
	}
	return rotated, nil
}

// compressOlder compresses the rotated files but the newest (which the
// runtime may still be flushing), oldest first; a file that fails is left
// as it is and the others are still tried.
func compressOlder(rotated []string) error {
	var errs []error
	for i, m := range rotated {
		if i == len(rotated)-1 || strings.HasSuffix(m, compressSuffix) {
			continue
		}
		if err := compress(m); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func stamp(p string) string { return strings.TrimSuffix(p, compressSuffix) }

// createCompressed creates the file a compressed copy is written to; tests
// replace it to fill the disk.
var createCompressed = func(path string) (io.WriteCloser, error) {
	return os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
}

// compress gzips a rotated file through a temporary file, then removes it.
func compress(path string) error {
	in, err := os.Open(path)
	if err != nil {
		return err
	}
	defer in.Close()
	tmp := path + compressSuffix + tmpSuffix
	out, err := createCompressed(tmp)
	if err != nil {
		return err
	}
	zw := gzip.NewWriter(out)
	_, err = io.Copy(zw, in)
	if cerr := zw.Close(); err == nil {
		err = cerr
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path+compressSuffix)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("compress %s: %w", path, err)
	}
	return os.Remove(path)
}

// globQuote escapes the glob metacharacters of a literal path.
func globQuote(p string) string {
	var b strings.Builder
	for _, r := range p {
		if strings.ContainsRune(`*?[\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}
