package runtime

import (
	"context"

	"k8s.io/apimachinery/pkg/types"
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
// ctx ends or the stream fails, calling onEvent for each with the pod's UID (empty when the
// event carries no sandbox status: containerd sends none once the sandbox is removed) and
// the container's or sandbox's ID, and returns why it ended (a runtime without the RPC:
// codes.Unimplemented). The PLEG relists the pod on them.
func (c *Client) ContainerEvents(ctx context.Context, onEvent func(uid types.UID, id string)) error {
	stream, err := c.rt.GetContainerEvents(ctx, &runtimeapi.GetEventsRequest{})
	if err != nil {
		return err
	}
	for {
		ev, err := stream.Recv()
		if err != nil {
			return err
		}
		onEvent(types.UID(ev.GetPodSandboxStatus().GetMetadata().GetUid()), ev.GetContainerId())
	}
}
