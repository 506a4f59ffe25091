package main

import (
	"context"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/nodeagent/nodeagent/pkg/runtime"
)

// envSource reads what containers' environments refer to: configMaps and
// secrets from the apiserver when a container is created, services from
// a watch-fed cache of every namespace, as the kubelet keeps them.
type envSource struct {
	client   kubernetes.Interface
	services corelisters.ServiceLister
	synced   cache.InformerSynced
}

var _ runtime.EnvSource = envSource{}

// newEnvSource builds the source and the informer factory feeding it;
// the caller starts the factory.
func newEnvSource(client kubernetes.Interface) (envSource, informers.SharedInformerFactory) {
	factory := informers.NewSharedInformerFactory(client, 0)
	svc := factory.Core().V1().Services()
	return envSource{client: client, services: svc.Lister(), synced: svc.Informer().HasSynced}, factory
}

func (e envSource) GetConfigMap(ctx context.Context, namespace, name string) (*v1.ConfigMap, error) {
	return e.client.CoreV1().ConfigMaps(namespace).Get(ctx, name, metav1.GetOptions{})
}

func (e envSource) GetSecret(ctx context.Context, namespace, name string) (*v1.Secret, error) {
	return e.client.CoreV1().Secrets(namespace).Get(ctx, name, metav1.GetOptions{})
}

func (e envSource) ListServices(_ context.Context, namespace string) ([]*v1.Service, error) {
	if !e.synced() {
		return nil, runtime.ErrServicesNotSynced
	}
	return e.services.Services(namespace).List(labels.Everything())
}
