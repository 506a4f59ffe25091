package sync

import (
	"slices"
	"testing"
	"time"

	"github.com/nodeagent/nodeagent/pkg/runtime"
)

// TestWithoutAbandonedStarts: only a start the runtime cancelled with its caller is left
// out; a start that failed on its own (a missing binary) or a container that ran stays.
func TestWithoutAbandonedStarts(t *testing.T) {
	exited := func(id, reason, msg string, started time.Time) *runtime.ContainerStatus {
		return &runtime.ContainerStatus{ID: id, Name: id, State: runtime.ContainerExited, ExitCode: 128, Reason: reason, Message: msg, StartedAt: started}
	}
	observed := &runtime.PodStatus{Containers: []*runtime.ContainerStatus{
		exited("cancelled", "StartError", `failed to start containerd task "x": context canceled`, time.Time{}),
		exited("failed", "StartError", `exec: "nope": executable file not found in $PATH`, time.Time{}),
		exited("ran", "Error", "context canceled", time.Unix(1, 0)),
	}}
	got, abandoned := withoutAbandonedStarts(observed)
	if !slices.Equal(abandoned, []string{"cancelled"}) {
		t.Errorf("abandoned %v, want the cancelled start alone", abandoned)
	}
	var kept []string
	for _, c := range got.Containers {
		kept = append(kept, c.ID)
	}
	if !slices.Equal(kept, []string{"failed", "ran"}) || len(observed.Containers) != 3 {
		t.Errorf("kept %v (input now %d containers), want failed and ran, the input unchanged", kept, len(observed.Containers))
	}
	if same, none := withoutAbandonedStarts(got); same != got || none != nil {
		t.Errorf("nothing abandoned: a copy or IDs returned")
	}
}
