package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/nodeagent/nodeagent/pkg/qos"
)

// procSwaps lists the host's active swap areas: a header line, then one line each.
const procSwaps = "/proc/swaps"

// errSwapOn is the refusal to run on a host with swap while failSwapOn holds, in the
// kubelet's words, so that the operator's search for the message finds the known fix.
var errSwapOn = errors.New("running with swap on is not supported, please disable swap or set --fail-swap-on flag to false")

// checkSwap refuses to start when failSwapOn is set and the host has an active swap
// area (as the kubelet does). A host without the swaps file (no swap support) passes.
func checkSwap(swapsFile string, failSwapOn bool) error {
	if !failSwapOn {
		return nil
	}
	data, err := os.ReadFile(swapsFile)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	} else if err != nil {
		return fmt.Errorf("read %s: %w", swapsFile, err)
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	for _, line := range lines[1:] {
		if strings.TrimSpace(line) != "" {
			return fmt.Errorf("%w (%s lists %s)", errSwapOn, swapsFile, strings.Fields(line)[0])
		}
	}
	return nil
}

// errLimitedSwapOnV1 refuses LimitedSwap on cgroup v1, in the kubelet's words:
// the kubelet fails at start rather than run without the swap it was asked for.
var errLimitedSwapOnV1 = errors.New("swap feature is enabled and LimitedSwap but it is only supported with cgroupv2")

// checkSwapBehavior refuses a swap behaviour the host cannot give.
func checkSwapBehavior(behavior string, unified bool) error {
	if behavior == qos.LimitedSwap && !unified {
		return fmt.Errorf("memorySwap.swapBehavior: %w", errLimitedSwapOnV1)
	}
	return nil
}

// hostSwap reads the swap facts the containers' swap limits are computed
// from, under root ("" is the real root): whether the host can limit a
// cgroup's swap (memory.memsw.limit_in_bytes at the top of the v1 memory
// hierarchy, memory.swap.max in the agent's own v2 cgroup: the root cgroup
// has none), and the host's swap (SwapTotal). A host whose files cannot be
// read has no swap controller, as the kubelet assumes.
func hostSwap(root, behavior string, unified bool) qos.SwapOptions {
	opts := qos.SwapOptions{Behavior: behavior, Unified: unified}
	p := filepath.Join(root, "/sys/fs/cgroup/memory/memory.memsw.limit_in_bytes")
	if unified {
		self, err := os.ReadFile(filepath.Join(root, "/proc/self/cgroup"))
		if err != nil {
			return opts
		}
		p = filepath.Join(root, "/sys/fs/cgroup", unifiedCgroup(string(self)), "memory.swap.max")
	}
	if _, err := os.Stat(p); err != nil {
		return opts
	}
	opts.Controller = true
	if meminfo, err := os.ReadFile(filepath.Join(root, "/proc/meminfo")); err == nil {
		opts.Capacity = swapTotal(string(meminfo))
	}
	return opts
}

// unifiedCgroup is the cgroup v2 path in a /proc/<pid>/cgroup file: the
// "0::" line.
func unifiedCgroup(procCgroup string) string {
	for _, line := range strings.Split(procCgroup, "\n") {
		if p, ok := strings.CutPrefix(strings.TrimSpace(line), "0::"); ok {
			return p
		}
	}
	return "/"
}

// swapTotal is SwapTotal from /proc/meminfo, in bytes; 0 when missing.
func swapTotal(meminfo string) int64 {
	for _, line := range strings.Split(meminfo, "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == "SwapTotal:" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				return 0
			}
			return kb * 1024
		}
	}
	return 0
}
