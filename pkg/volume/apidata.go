package volume

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"

	"github.com/nodeagent/nodeagent/pkg/volume/atomic"
)

const (
	configMapPluginName   = "kubernetes.io/configmap"
	secretPluginName      = "kubernetes.io/secret"
	downwardAPIPluginName = "kubernetes.io/downward-api"
	projectedPluginName   = "kubernetes.io/projected"

	// defaultFileMode is the API's default for defaultMode, used when a
	// static pod skipped defaulting.
	defaultFileMode int32 = 0o644
)

// payloadFunc computes the files of an API-data volume from the pod and the
// objects it references.
type payloadFunc func(ctx context.Context, req *setUpRequest) (map[string]atomic.FileProjection, error)

// apiDataPlugin publishes files computed from API objects (configMap,
// secret, downwardAPI, projected) through the atomic writer. Such volumes
// are always read-only to containers: a container that could write into
// one could plant links the writer later acts on (CVE-2017-1002102).
type apiDataPlugin struct {
	pluginName string
	supports   func(vol *v1.Volume) bool
	payload    payloadFunc
	// onTmpfs keeps the files off the node's disk (secrets, tokens).
	onTmpfs bool
	mounter mounter
	// published, when set, lets a refresh with nothing new skip the walk of the
	// volume (published.go).
	published *publishedPayloads
}

var _ plugin = (*apiDataPlugin)(nil)

func (p *apiDataPlugin) name() string { return p.pluginName }

func (p *apiDataPlugin) canSupport(vol *v1.Volume) bool { return p.supports(vol) }

func (p *apiDataPlugin) setUp(ctx context.Context, req *setUpRequest) (Mount, error) {
	// Compute first: a missing configMap must not leave a half-made volume.
	payload, err := p.payload(ctx, req)
	if err != nil {
		return Mount{}, err
	}
	mnt := Mount{HostPath: req.dir, ReadOnly: true, Managed: true, Plugin: p.name()}
	digest := payloadDigest(payload, req.fsGroup)
	if p.published.current(req.pod.UID, req.dir, digest) {
		return mnt, nil
	}
	_, statErr := os.Lstat(filepath.Join(req.dir, atomic.DataLink))
	fresh := errors.Is(statErr, fs.ErrNotExist)
	if err := p.publish(req, payload); err != nil {
		if fresh {
			_ = removeDir(p.mounter, req.dir)
		}
		return Mount{}, err
	}
	p.published.record(req.pod.UID, req.dir, digest)
	return mnt, nil
}

func (p *apiDataPlugin) publish(req *setUpRequest, payload map[string]atomic.FileProjection) error {
	if err := os.MkdirAll(req.dir, 0o750); err != nil {
		return fmt.Errorf("create volume directory: %w", err)
	}
	if p.onTmpfs {
		if err := ensureTmpfs(p.mounter, req.dir, nil, unix.MS_NOSUID|unix.MS_NODEV); err != nil {
			return err
		}
	}
	if err := os.Chmod(req.dir, 0o755); err != nil {
		return fmt.Errorf("chmod volume directory: %w", err)
	}
	w, err := atomic.NewWriter(req.dir)
	if err != nil {
		return err
	}
	fsg := planFSGroup(req.fsGroup, nil, true)
	var setPerms func(string) error
	if fsg != nil {
		setPerms = fsg.apply
	}
	if _, err := w.Write(payload, setPerms); err != nil {
		return fmt.Errorf("write volume files: %w", err)
	}
	return nil
}

func (p *apiDataPlugin) tearDown(_ context.Context, dir string) error {
	return removeDir(p.mounter, dir)
}

func fileMode(item *int32, def *int32) int32 {
	switch {
	case item != nil:
		return *item
	case def != nil:
		return *def
	}
	return defaultFileMode
}

// keyPayload maps keys to files: every key when items is empty, else each
// item's key to its path. A missing key is an error unless optional.
func keyPayload(kind string, data map[string][]byte, items []v1.KeyToPath, defaultMode *int32, optional bool) (map[string]atomic.FileProjection, error) {
	out := make(map[string]atomic.FileProjection, len(data))
	if len(items) == 0 {
		for k, v := range data {
			out[k] = atomic.FileProjection{Data: v, Mode: fileMode(nil, defaultMode)}
		}
		return out, nil
	}
	for _, it := range items {
		v, ok := data[it.Key]
		if !ok {
			if optional {
				continue
			}
			return nil, fmt.Errorf("%s references non-existent key: %s", kind, it.Key)
		}
		out[it.Path] = atomic.FileProjection{Data: v, Mode: fileMode(it.Mode, defaultMode)}
	}
	return out, nil
}
