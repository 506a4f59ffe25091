// Package mirror keeps a mirror pod in the apiserver for each static pod
// this node runs: the apiserver's read-only copy of the pod, through which
// users, the scheduler and controllers see it and its status is reported.
//
// The controller is level-triggered: each pass compares the static pods
// with the mirror pods the apiserver holds for this node and acts on the
// difference. A mirror pod is created for a static pod that has none; one
// that is being deleted or whose hash is not its static pod's is deleted
// and made again; one whose static pod is gone is deleted once nothing of
// the static pod runs. Any event (a file changed, a mirror pod changed or
// deleted) only wakes the loop.
package mirror

import (
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodeagent/nodeagent/pkg/config"
)

// action is one thing a pass does to the apiserver.
type action struct {
	// create makes the mirror pod of this static pod.
	create *v1.Pod
	// delete removes the mirror pod namespace/name with this UID.
	deleteNS, deleteName string
	deleteUID            types.UID
	// why says why, for the log.
	why string
}

// plan compares the static pods with the mirror pods the apiserver holds
// for this node and returns what to do: deletions first, then creations.
// stillRunning says whether a static pod of this namespace/name has not
// finished stopping; its mirror pod stays until it has, as the
// kubelet's, so its last status remains visible.
func plan(static, mirrors []*v1.Pod, stillRunning func(namespace, name string) bool) []action {
	want := map[string]*v1.Pod{}
	for _, p := range static {
		want[key(p)] = p
	}
	have := map[string]*v1.Pod{}
	var deletes, creates []action
	for _, m := range mirrors {
		k := key(m)
		have[k] = m
		s, ok := want[k]
		switch {
		case !ok:
			if stillRunning != nil && stillRunning(m.Namespace, m.Name) {
				continue
			}
			deletes = append(deletes, deleteOf(m, "its static pod is gone"))
		case m.DeletionTimestamp != nil:
			deletes = append(deletes, deleteOf(m, "it is being deleted"))
		case m.Annotations[config.AnnotationMirror] != hashOf(s):
			deletes = append(deletes, deleteOf(m, "its static pod changed"))
		}
	}
	for k, s := range want {
		m, ok := have[k]
		if ok && m.DeletionTimestamp == nil && m.Annotations[config.AnnotationMirror] == hashOf(s) {
			continue
		}
		creates = append(creates, action{create: s, why: "static pod has no mirror pod"})
	}
	byName := func(a, b action) int { return strings.Compare(a.name(), b.name()) }
	slices.SortFunc(deletes, byName)
	slices.SortFunc(creates, byName)
	return append(deletes, creates...)
}

func deleteOf(m *v1.Pod, why string) action {
	return action{deleteNS: m.Namespace, deleteName: m.Name, deleteUID: m.UID, why: why}
}

func (a action) name() string {
	if a.create != nil {
		return key(a.create)
	}
	return a.deleteNS + "/" + a.deleteName
}

func key(p *v1.Pod) string { return p.Namespace + "/" + p.Name }

// hashOf is a static pod's hash, which its mirror pod carries.
func hashOf(p *v1.Pod) string { return p.Annotations[config.AnnotationHash] }

// mirrorOf is the mirror pod the apiserver is given for static pod s: the
// same pod with the mirror annotation, owned by the node (the apiserver's
// NodeRestriction admission requires the owner reference), without the
// static pod's UID and status, which the apiserver sets.
func mirrorOf(s *v1.Pod, nodeName string, nodeUID types.UID) *v1.Pod {
	m := s.DeepCopy()
	m.UID = ""
	m.ResourceVersion = ""
	m.Status = v1.PodStatus{}
	m.Annotations[config.AnnotationMirror] = hashOf(s)
	controller := true
	m.OwnerReferences = []metav1.OwnerReference{{
		APIVersion: v1.SchemeGroupVersion.String(),
		Kind:       "Node",
		Name:       nodeName,
		UID:        nodeUID,
		Controller: &controller,
	}}
	return m
}
