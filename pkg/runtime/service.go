package runtime

import (
	"context"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// RuntimeService returns the CRI runtime service on the client's connection, for
// components that relay requests to the runtime as they are (the node API's exec, attach
// and port-forward, and its log and pod lookups).
func (c *Client) RuntimeService() runtimeapi.RuntimeServiceClient { return c.rt }

// ImageService is the raw CRI image service, for consumers that declare
// their interfaces in terms of the generated client (the node's stats).
func (c *Client) ImageService() runtimeapi.ImageServiceClient { return c.img }

// ContainerEvents streams the runtime's container events (CRI GetContainerEvents) until
// ctx ends or the stream fails, calling onEvent for each, and returns why it ended (a
// runtime without the RPC: codes.Unimplemented). The PLEG relists on them.
func (c *Client) ContainerEvents(ctx context.Context, onEvent func()) error {
	stream, err := c.rt.GetContainerEvents(ctx, &runtimeapi.GetEventsRequest{})
	if err != nil {
		return err
	}
	for {
		if _, err := stream.Recv(); err != nil {
			return err
		}
		onEvent()
	}
}
