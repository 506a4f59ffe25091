package config

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// DefaultFileCheckFrequency is the kubelet's fileCheckFrequency.
const DefaultFileCheckFrequency = 20 * time.Second

// ReasonFailedValidation is the reason of the event for a manifest the
// agent cannot run, the kubelet's reason for a pod that fails validation.
const ReasonFailedValidation = "FailedValidation"

// Recorder records events.
type Recorder interface {
	Eventf(object kruntime.Object, eventtype, reason, messageFmt string, args ...interface{})
}

// StaticConfig configures a FileSource.
type StaticConfig struct {
	// Dir is staticPodPath: every file in it not starting with a dot
	// holds one pod, in YAML or JSON.
	Dir string
	// NodeName suffixes the pods' names and binds them here.
	NodeName string
	// Period is fileCheckFrequency, how often Dir is read again;
	// defaults to DefaultFileCheckFrequency.
	Period time.Duration
	// Recorder gets a Warning event on the Node for each manifest that
	// cannot be run; nil records none.
	Recorder Recorder
	// Clock defaults to the real clock.
	Clock clock.WithTicker
}

// FileSource reads the static pod manifests of a directory and hands its
// handler each pod that appears or disappears. A changed file is a new
// pod (its UID is a hash of the content): the old one is removed and the
// new one added. It needs no apiserver.
type FileSource struct {
	cfg     StaticConfig
	nodeRef *v1.ObjectReference

	mu       sync.Mutex
	handler  Handler
	running  bool
	synced   bool
	pods     map[types.UID]*v1.Pod
	problems map[string]string // path → the problem last reported
}

// NewFileSource validates cfg and builds the source; SetHandler names its
// handler and Run starts reading.
func NewFileSource(cfg StaticConfig) (*FileSource, error) {
	if cfg.Dir == "" || cfg.NodeName == "" {
		return nil, errors.New("config: Dir and NodeName are required")
	}
	if cfg.Period <= 0 {
		cfg.Period = DefaultFileCheckFrequency
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	// The kubelet refers to its Node by name in events, its UID too.
	ref := &v1.ObjectReference{Kind: "Node", Name: cfg.NodeName, UID: types.UID(cfg.NodeName)}
	return &FileSource{cfg: cfg, nodeRef: ref, pods: map[types.UID]*v1.Pod{}, problems: map[string]string{}}, nil
}

// SetHandler names the handler given every static pod added and removed.
// It is called once, before Run.
func (s *FileSource) SetHandler(h Handler) error {
	if h == nil {
		return errors.New("config: nil handler")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.running:
		return errors.New("config: SetHandler after Run")
	case s.handler != nil:
		return errors.New("config: SetHandler called twice")
	}
	s.handler = h
	return nil
}

// HasSynced reports whether the directory has been read once and its
// pods handed over.
func (s *FileSource) HasSynced() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.synced
}

// Pods returns the static pods as last read, by name. They are shared and
// must not be modified.
func (s *FileSource) Pods() []*v1.Pod {
	s.mu.Lock()
	out := make([]*v1.Pod, 0, len(s.pods))
	for _, p := range s.pods {
		out = append(out, p)
	}
	s.mu.Unlock()
	slices.SortFunc(out, func(a, b *v1.Pod) int { return strings.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name) })
	return out
}

// Run reads the directory at once, then every Period, until ctx ends.
func (s *FileSource) Run(ctx context.Context) error {
	s.mu.Lock()
	h, running := s.handler, s.running
	s.running = s.running || h != nil
	s.mu.Unlock()
	switch {
	case h == nil:
		return errors.New("config: Run before SetHandler")
	case running:
		return errors.New("config: Run called twice")
	}
	logger := klog.FromContext(ctx).WithName("staticpods").WithValues("path", s.cfg.Dir)
	logger.Info("Reading static pod manifests", "period", s.cfg.Period)
	ctx = klog.NewContext(ctx, logger)
	t := s.cfg.Clock.NewTicker(s.cfg.Period)
	defer t.Stop()
	for {
		s.sync(ctx, h)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C():
		}
	}
}

// manifest is one file of the directory: its pod, or why it has none.
type manifest struct {
	path string
	pod  *v1.Pod
	err  error
}

// sync reads the directory once and hands over what changed.
func (s *FileSource) sync(ctx context.Context, h Handler) {
	logger := klog.FromContext(ctx)
	found, err := readManifests(s.cfg.Dir, s.cfg.NodeName)
	if errors.Is(err, fs.ErrNotExist) {
		// As the kubelet: a missing directory is an empty one.
		found, err = nil, nil
	}
	if err != nil {
		// Nothing could be read: keep running what runs.
		logger.Error(err, "Cannot read the static pod directory")
		return
	}
	found = dropDuplicates(found)
	s.report(logger, found)

	now := s.cfg.Clock.Now()
	s.mu.Lock()
	old := s.pods
	next := make(map[types.UID]*v1.Pod, len(found))
	var added []*v1.Pod
	for _, m := range found {
		if m.pod == nil {
			continue
		}
		if p, ok := old[m.pod.UID]; ok {
			next[p.UID] = p
			continue
		}
		m.pod.Annotations[AnnotationSource] = SourceFile
		m.pod.Annotations[AnnotationSeen] = now.Format(time.RFC3339Nano)
		next[m.pod.UID] = m.pod
		added = append(added, m.pod)
	}
	var removed []*v1.Pod
	for uid, p := range old {
		if _, ok := next[uid]; !ok {
			removed = append(removed, p)
		}
	}
	s.pods = next
	s.mu.Unlock()

	// Removals first: a changed file's old pod leaves before its new one
	// (same name) arrives.
	for _, p := range removed {
		logger.Info("Static pod removed", "pod", klog.KObj(p), "podUID", p.UID)
		h.RemovePod(p)
	}
	for _, p := range added {
		logger.Info("Static pod added", "pod", klog.KObj(p), "podUID", p.UID)
		h.UpsertPod(p)
	}
	s.mu.Lock()
	s.synced = true
	s.mu.Unlock()
}

// report logs each manifest's problem and records an event on the Node,
// once per problem: not again at every read of the directory.
func (s *FileSource) report(logger klog.Logger, found []manifest) {
	seen := map[string]bool{}
	for _, m := range found {
		if m.err == nil {
			continue
		}
		seen[m.path] = true
		msg := m.err.Error()
		if s.problems[m.path] == msg {
			continue
		}
		s.problems[m.path] = msg
		logger.Error(m.err, "Could not process manifest file", "file", m.path)
		if s.cfg.Recorder != nil {
			s.cfg.Recorder.Eventf(s.nodeRef, v1.EventTypeWarning, ReasonFailedValidation,
				"Could not process manifest file %s: %v", m.path, m.err)
		}
	}
	for path := range s.problems {
		if !seen[path] {
			delete(s.problems, path)
		}
	}
}

// readManifests reads every entry of dir whose name does not start with a
// dot, in name order, as the kubelet does. It fails only when the
// directory itself cannot be read; a bad file is a manifest with an error.
func readManifests(dir, nodeName string) ([]manifest, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []manifest
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			continue
		}
		path := filepath.Join(dir, e.Name())
		m := manifest{path: path}
		m.pod, m.err = readManifest(path, nodeName)
		if errors.Is(m.err, fs.ErrNotExist) {
			continue // removed while the directory was read
		}
		out = append(out, m)
	}
	return out, nil
}

// readManifest reads one file; symbolic links are followed, directories
// and other kinds of file are refused.
func readManifest(path, nodeName string) (*v1.Pod, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	switch {
	case info.IsDir():
		return nil, errors.New("a directory: static pod directories are not read recursively")
	case !info.Mode().IsRegular():
		return nil, fmt.Errorf("not a regular file (%s)", info.Mode().Type())
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxManifestSize+1))
	if err != nil {
		return nil, fmt.Errorf("read: %w", err)
	}
	if len(data) > maxManifestSize {
		return nil, fmt.Errorf("larger than %d bytes", maxManifestSize)
	}
	return decodeStaticPod(path, data, nodeName)
}

// dropDuplicates keeps one pod per namespace/name: the one read last (in
// file name order), as the kubelet's store keeps; the others become
// problems naming the file that wins.
func dropDuplicates(found []manifest) []manifest {
	winner := map[string]string{}
	for _, m := range found {
		if m.pod != nil {
			winner[m.pod.Namespace+"/"+m.pod.Name] = m.path
		}
	}
	for i, m := range found {
		if m.pod == nil {
			continue
		}
		key := m.pod.Namespace + "/" + m.pod.Name
		if w := winner[key]; w != m.path {
			found[i] = manifest{path: m.path, err: fmt.Errorf("pod %s is also defined by %s, which is used instead", key, w)}
		}
	}
	return found
}
