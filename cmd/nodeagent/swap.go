package main

import (
	"errors"
	"fmt"
	"os"
	"strings"
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
