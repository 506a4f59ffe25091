package harness

import "context"

// CSISanityVersion is the csi-test release whose csi-sanity checks the project's CSI driver.
const CSISanityVersion = "v5.6.0"

// EnsureCSISanity builds csi-sanity from github.com/kubernetes-csi/csi-test/v5 into the
// cache unless a previous run did, and returns the binary's path; about 20 seconds the
// first time.
func (c *Config) EnsureCSISanity(ctx context.Context) (string, error) {
	return c.ensureModuleBinary(ctx, moduleBinary{
		name: "csi-sanity", module: "github.com/kubernetes-csi/csi-test/v5", version: CSISanityVersion,
		pkg: "./cmd/csi-sanity", ldflags: "-X main.VERSION=" + CSISanityVersion,
	})
}
