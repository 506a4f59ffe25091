package runtime

import "github.com/nodeagent/nodeagent/pkg/expansion"

// lookupIn finds a name in the first of maps that holds it.
func lookupIn(maps ...map[string]string) func(string) (string, bool) {
	return func(name string) (string, bool) {
		for _, m := range maps {
			if v, ok := m[name]; ok {
				return v, true
			}
		}
		return "", false
	}
}

// ExpandCommand expands $(VAR) references in a container's command and
// args against its resolved environment; a reference to a variable the
// environment lacks stays as written.
func ExpandCommand(in []string, env map[string]string) []string {
	if in == nil {
		return nil
	}
	out := make([]string, len(in))
	lookup := lookupIn(env)
	for i, s := range in {
		out[i] = expansion.Expand(s, lookup)
	}
	return out
}
