package config

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// DefaultFileCheckFrequency is the kubelet's fileCheckFrequency.
const DefaultFileCheckFrequency = 20 * time.Second

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
	*staticSource
	cfg StaticConfig
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
	shared := newStaticSource(SourceFile, "manifest file", cfg.NodeName, cfg.Period, cfg.Clock, cfg.Recorder)
	return &FileSource{staticSource: shared, cfg: cfg}, nil
}

// Run reads the directory at once, then every Period, until ctx ends.
func (s *FileSource) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithName("staticpods").WithValues("path", s.cfg.Dir)
	return s.run(klog.NewContext(ctx, logger), s.sync)
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
	var pods []*v1.Pod
	var problems []problem
	for _, m := range dropDuplicates(found) {
		if m.err != nil {
			problems = append(problems, problem{where: m.path, err: m.err})
			continue
		}
		pods = append(pods, m.pod)
	}
	s.report(logger, problems)
	s.replace(logger, h, pods)
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
