package resizer

import (
	"sync"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
)

// A driver that grows volumes only offline answers ControllerExpandVolume with
// FailedPrecondition while a node uses the volume. The claim is then not tried again
// while a pod that has not ended uses it (--handle-volume-inuse-error).

// byClaimIndex indexes pods by the claims (namespace/name) they use, ended pods under none.
const byClaimIndex = "claim"

// podClaims is the index function of byClaimIndex.
func podClaims(obj any) ([]string, error) {
	pod, ok := obj.(*v1.Pod)
	if !ok || pod.Status.Phase == v1.PodSucceeded || pod.Status.Phase == v1.PodFailed {
		return nil, nil
	}
	var keys []string
	for _, vol := range pod.Spec.Volumes {
		if vol.PersistentVolumeClaim != nil {
			keys = append(keys, pod.Namespace+"/"+vol.PersistentVolumeClaim.ClaimName)
		}
	}
	return keys, nil
}

// inUseClaims are the claims (by UID) whose last expansion failed because the volume was
// in use. Workers of different claims share it.
type inUseClaims struct {
	mu   sync.Mutex
	uids map[types.UID]bool
}

func (s *inUseClaims) set(uid types.UID, inUse bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !inUse {
		delete(s.uids, uid)
		return
	}
	if s.uids == nil {
		s.uids = map[types.UID]bool{}
	}
	s.uids[uid] = true
}

func (s *inUseClaims) has(uid types.UID) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.uids[uid]
}

// claimUsed says whether a pod that has not ended uses the claim key (namespace/name).
func claimUsed(pods cache.Indexer, key string) bool {
	used, err := pods.ByIndex(byClaimIndex, key)
	return err == nil && len(used) > 0
}
