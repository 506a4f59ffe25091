package framework

import (
	"context"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/nodeagent/nodeagent/test/harness"
)

// PushBusyboxVariant pushes an image of the test's own to the local registry as
// nodeagent/<repoTag>: the e2e busybox image with the labels in its config and the layers
// on top. It returns the image's reference.
func PushBusyboxVariant(t testing.TB, ctx context.Context, repoTag string, labels map[string]string, layers ...v1.Layer) string {
	t.Helper()
	src, err := name.ParseReference(harness.RegistryAddr+"/e2e-test-images/busybox:"+harness.BusyboxE2ETag, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	img, err := remote.Image(src, remote.WithContext(ctx))
	if err != nil {
		t.Fatalf("read %s: %v", src, err)
	}
	if len(labels) > 0 {
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		c := cf.Config
		c.Labels = labels
		if img, err = mutate.Config(img, c); err != nil {
			t.Fatal(err)
		}
	}
	if len(layers) > 0 {
		if img, err = mutate.AppendLayers(img, layers...); err != nil {
			t.Fatal(err)
		}
	}
	ref := harness.RegistryAddr + "/nodeagent/" + repoTag
	dst, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(dst, img, remote.WithContext(ctx)); err != nil {
		t.Fatalf("push %s: %v", ref, err)
	}
	return ref
}
