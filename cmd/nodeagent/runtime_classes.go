package main

import (
	"context"
	"fmt"
	"time"

	nodev1 "k8s.io/api/node/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	nodelisters "k8s.io/client-go/listers/node/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/nodeagent/nodeagent/pkg/kube"
	podsync "github.com/nodeagent/nodeagent/pkg/sync"
)

// runtimeClassSyncWait bounds how long a sandbox about to be created
// waits for the first list of RuntimeClasses, just after start-up.
const runtimeClassSyncWait = 10 * time.Second

// runtimeClasses resolves RuntimeClass names to runtime handlers from a
// watch-fed cache of the cluster's RuntimeClasses, as the kubelet's
// RuntimeClass manager does: they are few, and read at every sandbox
// creation.
type runtimeClasses struct {
	lister nodelisters.RuntimeClassLister
	synced cache.InformerSynced
}

var _ podsync.RuntimeClasses = runtimeClasses{}

// newRuntimeClasses builds the lookup and the RuntimeClass informer feeding
// it, which the caller runs.
func newRuntimeClasses(client kube.Interface) (runtimeClasses, cache.SharedIndexInformer) {
	inf := kube.NewInformer(client, client.NodeV1().RuntimeClasses(), &nodev1.RuntimeClass{}, nil)
	return runtimeClasses{lister: nodelisters.NewRuntimeClassLister(inf.GetIndexer()), synced: inf.HasSynced}, inf
}

// Handler returns the handler of the RuntimeClass name. Before the first
// list it waits a little rather than call a RuntimeClass missing that is
// merely not read yet.
func (r runtimeClasses) Handler(ctx context.Context, name string) (string, error) {
	if !r.synced() {
		ctx, cancel := context.WithTimeout(ctx, runtimeClassSyncWait)
		defer cancel()
		if !cache.WaitForCacheSync(ctx.Done(), r.synced) {
			return "", fmt.Errorf("failed to lookup RuntimeClass %s: RuntimeClasses have not been listed yet", name)
		}
	}
	rc, err := r.lister.Get(name)
	switch {
	case apierrors.IsNotFound(err):
		// The kubelet's words: runtimeclass.node.k8s.io "name" not found.
		return "", err
	case err != nil:
		return "", fmt.Errorf("failed to lookup RuntimeClass %s: %w", name, err)
	}
	return rc.Handler, nil
}
