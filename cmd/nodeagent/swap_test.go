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
