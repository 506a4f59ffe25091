package main

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// TestCheckSwap: with failSwapOn, a host whose /proc/swaps lists an area is refused with
// the kubelet's message; a header alone, a missing file, or failSwapOn false pass.
func TestCheckSwap(t *testing.T) {
	const header = "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n"
	write := func(content string) string {
		p := filepath.Join(t.TempDir(), "swaps")
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	withSwap := write(header + "/swapfile                               file\t\t1048572\t\t0\t\t-2\n")
	for _, tc := range []struct {
		name       string
		file       string
		failSwapOn bool
		refused    bool
	}{
		{"swap on, failSwapOn", withSwap, true, true},
		{"swap on, failSwapOn false", withSwap, false, false},
		{"no swap areas", write(header), true, false},
		{"empty file", write(""), true, false},
		{"no swaps file", filepath.Join(t.TempDir(), "absent"), true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkSwap(tc.file, tc.failSwapOn)
			if got := errors.Is(err, errSwapOn); got != tc.refused || (!tc.refused && err != nil) {
				t.Errorf("checkSwap = %v, want refused %v", err, tc.refused)
			}
		})
	}
}

// TestCheckSwapBehavior: LimitedSwap is refused on cgroup v1 with the kubelet's
// message; NoSwap and the default pass on either version.
func TestCheckSwapBehavior(t *testing.T) {
	for _, tc := range []struct {
		behavior string
		unified  bool
		refused  bool
	}{
		{"LimitedSwap", false, true},
		{"LimitedSwap", true, false},
		{"NoSwap", false, false},
		{"", false, false},
	} {
		err := checkSwapBehavior(tc.behavior, tc.unified)
		if got := errors.Is(err, errLimitedSwapOnV1); got != tc.refused || (!tc.refused && err != nil) {
			t.Errorf("checkSwapBehavior(%q, unified %v) = %v, want refused %v", tc.behavior, tc.unified, err, tc.refused)
		}
	}
}

// TestHostSwap reads the swap controller and capacity from a fake host tree.
func TestHostSwap(t *testing.T) {
	const meminfo = "MemTotal:       16384000 kB\nSwapTotal:       2097152 kB\nSwapFree:        2097152 kB\n"
	mk := func(files map[string]string) string {
		root := t.TempDir()
		for p, content := range files {
			full := filepath.Join(root, p)
			if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return root
	}
	for _, tc := range []struct {
		name           string
		files          map[string]string
		unified        bool
		wantController bool
		wantCapacity   int64
	}{
		{name: "cgroup v1 with memsw", files: map[string]string{
			"/sys/fs/cgroup/memory/memory.memsw.limit_in_bytes": "9223372036854771712\n", "/proc/meminfo": meminfo},
			wantController: true, wantCapacity: 2 << 30},
		{name: "cgroup v1 without memsw", files: map[string]string{"/proc/meminfo": meminfo}},
		{name: "cgroup v2: the agent's own cgroup has swap.max", unified: true, files: map[string]string{
			"/proc/self/cgroup": "0::/system.slice/nodeagent.service\n",
			"/sys/fs/cgroup/system.slice/nodeagent.service/memory.swap.max": "max\n", "/proc/meminfo": meminfo},
			wantController: true, wantCapacity: 2 << 30},
		{name: "cgroup v2 without swap.max", unified: true, files: map[string]string{
			"/proc/self/cgroup": "0::/system.slice/nodeagent.service\n", "/proc/meminfo": meminfo}},
		{name: "no meminfo: no swap", files: map[string]string{"/sys/fs/cgroup/memory/memory.memsw.limit_in_bytes": "0\n"},
			wantController: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := hostSwap(mk(tc.files), "NoSwap", tc.unified)
			if got.Controller != tc.wantController || got.Capacity != tc.wantCapacity || got.Unified != tc.unified || got.Behavior != "NoSwap" {
				t.Errorf("hostSwap = %+v, want controller %v capacity %d", got, tc.wantController, tc.wantCapacity)
			}
		})
	}
}
