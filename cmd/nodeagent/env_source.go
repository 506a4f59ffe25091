package main

import (
	"context"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/nodeagent/nodeagent/pkg/kube"
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

// newEnvSource builds the source and the informer feeding its services;
// the caller runs the informer and objects.
func newEnvSource(client kube.Interface, objects *objcache.Cache) (envSource, cache.SharedIndexInformer) {
	inf := kube.NewInformer(client, client.CoreV1().Services(metav1.NamespaceAll), &v1.Service{}, nil)
	return envSource{objects: objects, services: corelisters.NewServiceLister(inf.GetIndexer()), synced: inf.HasSynced}, inf
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
