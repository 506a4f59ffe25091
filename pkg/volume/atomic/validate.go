package atomic

import (
	"fmt"
	"path/filepath"
	"strings"
)

// maxPathLen and maxNameLen are the limits the API server also enforces.
const (
	maxPathLen = 4096
	maxNameLen = 255
)

// ValidatePath refuses a payload path that could leave the target directory
// or collide with the writer's own entries: empty, absolute, too long, any
// ".." element, or a leading "..".
func ValidatePath(p string) error {
	switch {
	case p == "":
		return fmt.Errorf("invalid path: must not be empty")
	case len(p) > maxPathLen:
		return fmt.Errorf("invalid path %q: longer than %d bytes", p, maxPathLen)
	case filepath.IsAbs(p):
		return fmt.Errorf("invalid path %q: must be relative", p)
	case strings.HasPrefix(p, ".."):
		return fmt.Errorf("invalid path %q: must not start with '..'", p)
	}
	for _, elem := range strings.Split(p, "/") {
		if elem == ".." {
			return fmt.Errorf("invalid path %q: must not contain '..'", p)
		}
		if len(elem) > maxNameLen {
			return fmt.Errorf("invalid path %q: element longer than %d bytes", p, maxNameLen)
		}
	}
	return nil
}

// ValidatePayload checks every path and returns the payload keyed by cleaned
// paths. Two paths where one is a directory of the other are refused.
func ValidatePayload(payload map[string]FileProjection) (map[string]FileProjection, error) {
	clean := make(map[string]FileProjection, len(payload))
	for p, fp := range payload {
		if err := ValidatePath(p); err != nil {
			return nil, err
		}
		c := filepath.Clean(p)
		if c == "." || strings.HasPrefix(c, "..") {
			return nil, fmt.Errorf("invalid path %q", p)
		}
		if _, dup := clean[c]; dup {
			return nil, fmt.Errorf("duplicate path %q", c)
		}
		clean[c] = fp
	}
	for p := range clean {
		for dir := filepath.Dir(p); dir != "."; dir = filepath.Dir(dir) {
			if _, ok := clean[dir]; ok {
				return nil, fmt.Errorf("path %q is both a file and the directory of %q", dir, p)
			}
		}
	}
	return clean, nil
}
