package runtime

import "strings"

// expandRefs replaces the $(NAME) references in s with what lookup
// returns for them, with the API's rules: $$ is a literal $, a reference
// lookup does not know is left as written, and a $ that starts no
// reference (a lone $, $x, an unclosed "$(") stays as it is.
func expandRefs(s string, lookup func(string) (string, bool)) string {
	if !strings.Contains(s, "$") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 == len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
		case '(':
			end := strings.IndexByte(s[i+2:], ')')
			if end < 0 {
				// Unclosed: keep "$(" and go on reading after it.
				b.WriteString("$(")
				i++
				continue
			}
			name := s[i+2 : i+2+end]
			if v, ok := lookup(name); ok {
				b.WriteString(v)
			} else {
				b.WriteString("$(" + name + ")")
			}
			i += 2 + end
		default:
			// "$x": written as is; x is read again as ordinary input.
			b.WriteByte('$')
			b.WriteByte(s[i+1])
			i++
		}
	}
	return b.String()
}

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
// args against its resolved environment.
func ExpandCommand(in []string, env map[string]string) []string {
	if in == nil {
		return nil
	}
	out := make([]string, len(in))
	lookup := lookupIn(env)
	for i, s := range in {
		out[i] = expandRefs(s, lookup)
	}
	return out
}
