package runtime

import (
	"context"
	"fmt"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// RemoveImage removes an image (by ID, tag or digest) and every tag of it.
// Removing an image the runtime no longer holds succeeds, as CRI says it
// must.
func (c *Client) RemoveImage(ctx context.Context, image *runtimeapi.ImageSpec) error {
	ctx, cancel := c.callCtx(ctx)
	defer cancel()
	if _, err := c.img.RemoveImage(ctx, &runtimeapi.RemoveImageRequest{Image: image}); err != nil {
		return fmt.Errorf("CRI RemoveImage %s: %w", image.GetImage(), err)
	}
	return nil
}
