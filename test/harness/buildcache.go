package harness

import (
	"os"
	"path/filepath"
)

// missingBinaries returns the entries of names whose binary is not in bin yet: a binary
// added to a list that a previous run built is then built alone, and the others (the
// upstream ones took about 25 minutes on 2 cores) stay as they are.
func missingBinaries(bin string, names map[string]string) map[string]string {
	out := map[string]string{}
	for name, pkg := range names {
		if !complete(bin, map[string]string{name: pkg}) {
			out[name] = pkg
		}
	}
	return out
}

// installBinaries moves the named binaries from the build directory tmp into bin, one
// rename each, and removes tmp. Other files in bin (binaries built earlier, e2e.test) stay;
// a move cut short leaves bin without the rest of names, so complete still says no.
func installBinaries(tmp, bin string, names map[string]string) error {
	if err := os.MkdirAll(bin, 0o755); err != nil {
		return err
	}
	for name := range names {
		if err := os.Rename(filepath.Join(tmp, name), filepath.Join(bin, name)); err != nil {
			return err
		}
	}
	return os.RemoveAll(tmp)
}
