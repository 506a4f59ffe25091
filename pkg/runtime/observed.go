package runtime

import (
	"sort"
	"strconv"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// PodStatus is what the runtime holds of one pod: its sandboxes and its
// containers, newest first. It is rebuilt from CRI on every relist.
type PodStatus struct {
	PodRef
	Sandboxes  []*SandboxStatus
	Containers []*ContainerStatus
}

// SandboxStatus is the observed state of one pod sandbox.
type SandboxStatus struct {
	ID        string
	Attempt   uint32
	Ready     bool
	CreatedAt time.Time
	IPs       []string
}

// ContainerState is the runtime state of a container.
type ContainerState string

// The states a container can be in, as CRI reports them.
const (
	ContainerCreated ContainerState = "created"
	ContainerRunning ContainerState = "running"
	ContainerExited  ContainerState = "exited"
	ContainerUnknown ContainerState = "unknown"
)

// ContainerStatus is the observed state of one container.
type ContainerStatus struct {
	ID        string
	SandboxID string
	Name      string
	Init      bool
	// Ephemeral: one of the pod's ephemeral containers.
	Ephemeral    bool
	RestartCount int32
	State        ContainerState
	CreatedAt    time.Time
	StartedAt    time.Time
	FinishedAt   time.Time
	ExitCode     int32
	Reason       string
	Message      string
	Image        string
	ImageRef     string
	// Hash is the ContainerHash of the spec it was created from (empty
	// for containers made before hashes were recorded).
	Hash string
	// User is the identity the process runs as, when the runtime says.
	User *ContainerUser
	// TerminationMessage is what an exited container left as its
	// termination message (TerminationMessage), read once it exited.
	TerminationMessage string
}

// ContainerUser is the Linux identity of a container's process.
type ContainerUser struct {
	UID, GID           int64
	SupplementalGroups []int64
}

// LatestSandbox returns the sandbox the pod lives in, or nil: the newest
// ready sandbox that holds a live (running or created) container, else
// the newest ready one, else the newest. Beside it there is normally no
// other ready sandbox; when there is (a RunPodSandbox that completed after
// its caller gave up), the one with the pod's containers is the pod's.
func (s *PodStatus) LatestSandbox() *SandboxStatus {
	if s == nil || len(s.Sandboxes) == 0 {
		return nil
	}
	var ready *SandboxStatus
	for _, sb := range s.Sandboxes {
		if !sb.Ready {
			continue
		}
		if s.holdsLive(sb.ID) {
			return sb
		}
		if ready == nil {
			ready = sb
		}
	}
	if ready != nil {
		return ready
	}
	return s.Sandboxes[0]
}

// holdsLive says whether a running or created container is in the sandbox.
func (s *PodStatus) holdsLive(sandboxID string) bool {
	for _, c := range s.Containers {
		if c.SandboxID == sandboxID && (c.State == ContainerRunning || c.State == ContainerCreated) {
			return true
		}
	}
	return false
}

// ContainersNamed returns the containers of one name, newest first.
func (s *PodStatus) ContainersNamed(name string) []*ContainerStatus {
	if s == nil {
		return nil
	}
	var out []*ContainerStatus
	for _, c := range s.Containers {
		if c.Name == name {
			out = append(out, c)
		}
	}
	return out
}

// Latest returns the newest container of a name, or nil.
func (s *PodStatus) Latest(name string) *ContainerStatus {
	if cs := s.ContainersNamed(name); len(cs) > 0 {
		return cs[0]
	}
	return nil
}

// SortNewestFirst orders sandboxes and containers newest first, by
// attempt/restart count and then creation time.
func (s *PodStatus) SortNewestFirst() {
	sort.SliceStable(s.Sandboxes, func(i, j int) bool {
		a, b := s.Sandboxes[i], s.Sandboxes[j]
		if a.Attempt != b.Attempt {
			return a.Attempt > b.Attempt
		}
		return a.CreatedAt.After(b.CreatedAt)
	})
	sort.SliceStable(s.Containers, func(i, j int) bool {
		a, b := s.Containers[i], s.Containers[j]
		if !a.CreatedAt.Equal(b.CreatedAt) {
			return a.CreatedAt.After(b.CreatedAt)
		}
		return a.RestartCount > b.RestartCount
	})
}

// SandboxFromCRI builds the observed sandbox from a list entry and,
// when available, its status (for the IPs).
func SandboxFromCRI(sb *runtimeapi.PodSandbox, st *runtimeapi.PodSandboxStatus) (*SandboxStatus, PodRef, bool) {
	ref, ok := podRefFromLabels(sb.GetLabels())
	if !ok {
		return nil, PodRef{}, false
	}
	out := &SandboxStatus{
		ID:        sb.GetId(),
		Attempt:   sb.GetMetadata().GetAttempt(),
		Ready:     sb.GetState() == runtimeapi.PodSandboxState_SANDBOX_READY,
		CreatedAt: time.Unix(0, sb.GetCreatedAt()),
	}
	out.IPs = SandboxIPs(st)
	return out, ref, true
}

// SandboxIPs are a sandbox's addresses, primary first.
func SandboxIPs(st *runtimeapi.PodSandboxStatus) []string {
	var ips []string
	if ip := st.GetNetwork().GetIp(); ip != "" {
		ips = append(ips, ip)
	}
	for _, ip := range st.GetNetwork().GetAdditionalIps() {
		if ip.GetIp() != "" {
			ips = append(ips, ip.GetIp())
		}
	}
	return ips
}

// ContainerFromCRI builds the observed container from a list entry and
// its status (nil when the status could not be read).
func ContainerFromCRI(c *runtimeapi.Container, st *runtimeapi.ContainerStatus) (*ContainerStatus, PodRef, bool) {
	ref, ok := podRefFromLabels(c.GetLabels())
	if !ok {
		return nil, PodRef{}, false
	}
	restarts, _ := strconv.Atoi(c.GetAnnotations()[AnnotationRestartCount])
	out := &ContainerStatus{
		ID:           c.GetId(),
		SandboxID:    c.GetPodSandboxId(),
		Name:         c.GetLabels()[LabelContainer],
		Init:         c.GetAnnotations()[AnnotationContainerType] == containerTypeInit,
		Ephemeral:    c.GetAnnotations()[AnnotationContainerType] == containerTypeEphemeral,
		Hash:         c.GetAnnotations()[AnnotationContainerHash],
		RestartCount: int32(restarts),
		State:        stateFromCRI(c.GetState()),
		CreatedAt:    time.Unix(0, c.GetCreatedAt()),
		Image:        c.GetImage().GetImage(),
		ImageRef:     c.GetImageRef(),
	}
	if st != nil {
		out.State = stateFromCRI(st.GetState())
		out.StartedAt = unixNanoOrZero(st.GetStartedAt())
		out.FinishedAt = unixNanoOrZero(st.GetFinishedAt())
		out.ExitCode = st.GetExitCode()
		out.Reason = st.GetReason()
		out.Message = st.GetMessage()
		if img := st.GetImage().GetImage(); img != "" {
			out.Image = img
		}
		if ref := st.GetImageRef(); ref != "" {
			out.ImageRef = ref
		}
		if u := st.GetUser().GetLinux(); u != nil {
			out.User = &ContainerUser{UID: u.GetUid(), GID: u.GetGid(), SupplementalGroups: u.GetSupplementalGroups()}
		}
	}
	return out, ref, true
}

func stateFromCRI(s runtimeapi.ContainerState) ContainerState {
	switch s {
	case runtimeapi.ContainerState_CONTAINER_CREATED:
		return ContainerCreated
	case runtimeapi.ContainerState_CONTAINER_RUNNING:
		return ContainerRunning
	case runtimeapi.ContainerState_CONTAINER_EXITED:
		return ContainerExited
	default:
		return ContainerUnknown
	}
}

func unixNanoOrZero(ns int64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns)
}
