package main

import (
	"context"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/nodeagent/nodeagent/pkg/objcache"
	"github.com/nodeagent/nodeagent/pkg/runtime"
)

// envSource reads what containers' environments refer to: configMaps and
// secrets through the watch-fed object cache of the pods' references,
// services from a watch-fed cache of every namespace, as the kubelet keeps
// them.
type envSource struct {
	objects  *objcache.Cache
	services corelisters.ServiceLister
	synced   cache.InformerSynced
}

var _ runtime.EnvSource = envSource{}

// newEnvSource builds the source and the informer factory feeding its
// services; the caller starts the factory and runs objects.
func newEnvSource(client kubernetes.Interface, objects *objcache.Cache) (envSource, informers.SharedInformerFactory) {
	factory := informers.NewSharedInformerFactory(client, 0)
	svc := factory.Core().V1().Services()
	return envSource{objects: objects, services: svc.Lister(), synced: svc.Informer().HasSynced}, factory
}

func (e envSource) GetConfigMap(ctx context.Context, namespace, name string) (*v1.ConfigMap, error) {
	return e.objects.GetConfigMap(ctx, namespace, name)
}

func (e envSource) GetSecret(ctx context.Context, namespace, name string) (*v1.Secret, error) {
	return e.objects.GetSecret(ctx, namespace, name)
}

func (e envSource) ListServices(_ context.Context, namespace string) ([]*v1.Service, error) {
	if !e.synced() {
		return nil, runtime.ErrServicesNotSynced
	}
	return e.services.Services(namespace).List(labels.Everything())
}
