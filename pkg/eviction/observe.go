package eviction

import (
	"time"

	v1 "k8s.io/api/core/v1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// observation is one signal as measured: what is available of what
// capacity, and when it was read.
type observation struct {
	available, capacity int64
	at                  time.Time
}

// observations are the signals measured at once.
type observations map[Signal]observation

// observe reads every signal the summary holds, as the kubelet derives
// them from its Summary API: memory from the node's working set (the
// root cgroup's usage less inactive file pages) against its capacity,
// allocatable memory from the kubepods system container, the node's and
// the runtime's filesystems from their statfs, PIDs from the kernel's
// limit less the processes running. A signal whose numbers are missing
// is left out, and its thresholds are then not met.
func observe(s *statsapi.Summary) observations {
	out := observations{}
	node := s.Node
	if m := node.Memory; m != nil && m.AvailableBytes != nil && m.WorkingSetBytes != nil {
		out[SignalMemoryAvailable] = observation{
			available: int64(*m.AvailableBytes),
			capacity:  int64(*m.AvailableBytes + *m.WorkingSetBytes),
			at:        m.Time.Time,
		}
	}
	for _, c := range node.SystemContainers {
		if c.Name != statsapi.SystemContainerPods {
			continue
		}
		if m := c.Memory; m != nil && m.AvailableBytes != nil && m.WorkingSetBytes != nil {
			out[SignalAllocatableMemoryAvailable] = observation{
				available: int64(*m.AvailableBytes),
				capacity:  int64(*m.AvailableBytes + *m.WorkingSetBytes),
				at:        m.Time.Time,
			}
		}
	}
	observeFs(out, node.Fs, SignalNodeFsAvailable, SignalNodeFsInodesFree)
	if rt := node.Runtime; rt != nil {
		observeFs(out, rt.ImageFs, SignalImageFsAvailable, SignalImageFsInodesFree)
		observeFs(out, rt.ContainerFs, SignalContainerFsAvailable, SignalContainerFsInodesFree)
	}
	if r := node.Rlimit; r != nil && r.MaxPID != nil && r.NumOfRunningProcesses != nil {
		out[SignalPIDAvailable] = observation{
			available: *r.MaxPID - *r.NumOfRunningProcesses,
			capacity:  *r.MaxPID,
			at:        r.Time.Time,
		}
	}
	return out
}

func observeFs(out observations, fs *statsapi.FsStats, bytes, inodes Signal) {
	if fs == nil {
		return
	}
	if fs.AvailableBytes != nil && fs.CapacityBytes != nil {
		out[bytes] = observation{available: int64(*fs.AvailableBytes), capacity: int64(*fs.CapacityBytes), at: fs.Time.Time}
	}
	if fs.InodesFree != nil && fs.Inodes != nil {
		out[inodes] = observation{available: int64(*fs.InodesFree), capacity: int64(*fs.Inodes), at: fs.Time.Time}
	}
}

// met says whether t is met by what is observed: less is available than
// the threshold, plus its minimum reclaim with withReclaim (a threshold
// already met stays met until that much more is free). A signal not
// observed does not meet it.
func met(t Threshold, obs observations, withReclaim bool) bool {
	o, ok := obs[t.Signal]
	if !ok {
		return false
	}
	limit := t.Value.of(o.capacity)
	if withReclaim && t.MinReclaim != nil {
		limit += t.MinReclaim.of(o.capacity)
	}
	return o.available < limit
}

// Resources a signal's pressure is on, as the kubelet names them in its
// messages; inodes and pids are its own names for what has no v1 name.
const (
	resourceInodes v1.ResourceName = "inodes"
	resourcePIDs   v1.ResourceName = "pids"
)

// signalResource is the resource each signal measures.
var signalResource = map[Signal]v1.ResourceName{
	SignalMemoryAvailable:            v1.ResourceMemory,
	SignalAllocatableMemoryAvailable: v1.ResourceMemory,
	SignalNodeFsAvailable:            v1.ResourceEphemeralStorage,
	SignalImageFsAvailable:           v1.ResourceEphemeralStorage,
	SignalContainerFsAvailable:       v1.ResourceEphemeralStorage,
	SignalNodeFsInodesFree:           resourceInodes,
	SignalImageFsInodesFree:          resourceInodes,
	SignalContainerFsInodesFree:      resourceInodes,
	SignalPIDAvailable:               resourcePIDs,
}

// signalCondition is the node condition a met signal sets.
var signalCondition = map[Signal]v1.NodeConditionType{
	SignalMemoryAvailable:            v1.NodeMemoryPressure,
	SignalAllocatableMemoryAvailable: v1.NodeMemoryPressure,
	SignalNodeFsAvailable:            v1.NodeDiskPressure,
	SignalNodeFsInodesFree:           v1.NodeDiskPressure,
	SignalImageFsAvailable:           v1.NodeDiskPressure,
	SignalImageFsInodesFree:          v1.NodeDiskPressure,
	SignalContainerFsAvailable:       v1.NodeDiskPressure,
	SignalContainerFsInodesFree:      v1.NodeDiskPressure,
	SignalPIDAvailable:               v1.NodePIDPressure,
}

// pressureConditions are the conditions eviction sets, in the order the
// kubelet reports them.
var pressureConditions = []v1.NodeConditionType{v1.NodeMemoryPressure, v1.NodeDiskPressure, v1.NodePIDPressure}
