package stats

import (
	"context"
	"errors"
	"fmt"

	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// ImageFsStats reports the runtime's image filesystem as the summary's
// node.runtime.imageFs shows it: the images' usage as the runtime counts
// it, the filesystem's capacity and free space from statfs of where the
// runtime keeps them (nil when that cannot be read). Image garbage
// collection and eviction decide from it.
func (p *Provider) ImageFsStats(ctx context.Context) (*statsapi.FsStats, error) {
	rs, err := p.readRuntimeFs(ctx, p.cfg.Clock.Now(), false)
	if err != nil {
		return nil, fmt.Errorf("image filesystem: %w", err)
	}
	if rs.ImageFs == nil {
		return nil, errors.New("image filesystem: the runtime reports none")
	}
	return rs.ImageFs, nil
}
