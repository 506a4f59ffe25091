package runtime

import runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

// RuntimeService returns the CRI runtime service on the client's connection, for
// components that relay requests to the runtime as they are (the node API's exec, attach
// and port-forward, and its log and pod lookups).
func (c *Client) RuntimeService() runtimeapi.RuntimeServiceClient { return c.rt }

// ImageService is the raw CRI image service, for consumers that declare
// their interfaces in terms of the generated client (the node's stats).
func (c *Client) ImageService() runtimeapi.ImageServiceClient { return c.img }
