package runtime

import (
	"encoding/json"
	"hash/fnv"
	"strconv"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// The labels and annotations the agent puts on sandboxes and containers.
// They carry the kubelet's keys, so that everything the agent needs after
// a restart can be read back from the runtime, and tools built for the
// kubelet (crictl, log collectors) recognise the pods.
const (
	LabelPodName      = "io.kubernetes.pod.name"
	LabelPodNamespace = "io.kubernetes.pod.namespace"
	LabelPodUID       = "io.kubernetes.pod.uid"
	LabelContainer    = "io.kubernetes.container.name"

	AnnotationRestartCount             = "io.kubernetes.container.restartCount"
	AnnotationContainerHash            = "io.kubernetes.container.hash"
	AnnotationTerminationMessagePath   = "io.kubernetes.container.terminationMessagePath"
	AnnotationTerminationMessagePolicy = "io.kubernetes.container.terminationMessagePolicy"
	AnnotationPodGracePeriod           = "io.kubernetes.pod.terminationGracePeriod"
	// AnnotationContainerType tells init, app and ephemeral containers
	// apart.
	AnnotationContainerType = "nodeagent.io/container-type"

	containerTypeInit      = "init"
	containerTypeApp       = "app"
	containerTypeEphemeral = "ephemeral"
)

// PodRef names the pod a sandbox or container belongs to, as read back
// from its labels.
type PodRef struct {
	UID       types.UID
	Name      string
	Namespace string
}

// podRefFromLabels returns the pod of a runtime object, or false when the
// object was not made by an agent.
func podRefFromLabels(labels map[string]string) (PodRef, bool) {
	uid := labels[LabelPodUID]
	if uid == "" {
		return PodRef{}, false
	}
	return PodRef{UID: types.UID(uid), Name: labels[LabelPodName], Namespace: labels[LabelPodNamespace]}, true
}

func sandboxLabels(pod *v1.Pod) map[string]string {
	labels := make(map[string]string, len(pod.Labels)+3)
	for k, v := range pod.Labels {
		labels[k] = v
	}
	labels[LabelPodName] = pod.Name
	labels[LabelPodNamespace] = pod.Namespace
	labels[LabelPodUID] = string(pod.UID)
	return labels
}

func containerLabels(pod *v1.Pod, name string) map[string]string {
	return map[string]string{
		LabelPodName:      pod.Name,
		LabelPodNamespace: pod.Namespace,
		LabelPodUID:       string(pod.UID),
		LabelContainer:    name,
	}
}

func containerAnnotations(pod *v1.Pod, c *v1.Container, restartCount int32, in ContainerInputs) map[string]string {
	a := map[string]string{
		AnnotationRestartCount:             strconv.Itoa(int(restartCount)),
		AnnotationTerminationMessagePath:   c.TerminationMessagePath,
		AnnotationTerminationMessagePolicy: string(c.TerminationMessagePolicy),
		AnnotationContainerType:            containerTypeApp,
		AnnotationContainerHash:            ContainerHash(c),
	}
	switch {
	case in.Init:
		a[AnnotationContainerType] = containerTypeInit
	case in.Ephemeral:
		a[AnnotationContainerType] = containerTypeEphemeral
	}
	if g := pod.Spec.TerminationGracePeriodSeconds; g != nil {
		a[AnnotationPodGracePeriod] = strconv.FormatInt(*g, 10)
	}
	return a
}

// ContainerHash identifies what of a container's spec needs a new
// container when it changes (the image, in practice: the rest of a pod's
// containers is immutable). Only fields that defaulting never touches are
// hashed, so that an apiserver upgrade does not restart every container.
func ContainerHash(c *v1.Container) string {
	data, _ := json.Marshal(struct {
		Name, Image, WorkingDir string
		Command, Args           []string
	}{c.Name, c.Image, c.WorkingDir, c.Command, c.Args})
	h := fnv.New32a()
	_, _ = h.Write(data)
	return strconv.FormatUint(uint64(h.Sum32()), 16)
}

func secondsDuration(s int64) time.Duration { return time.Duration(s) * time.Second }
