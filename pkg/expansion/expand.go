// Package expansion expands $(VAR) references, the syntax the pod API
// gives a container's command, args and env values and a volumeMount's
// subPathExpr. Every user goes through Expand so that an odd input
// ("$(", "$$(A)", "$(A") reads the same in each place, and as the
// kubelet reads it: workloads move between nodes and must not see the
// agent change what their command line says.
package expansion

import (
	"strings"
	"unicode/utf8"
)

// Expand returns s with each $(NAME) reference replaced by lookup's value
// for NAME. The API's rules, which the kubelet follows:
//
//   - "$$" is a literal "$", so "$$(A)" is the text "$(A)";
//   - a reference lookup does not know (ok false) stays as written;
//   - NAME runs to the first ")", so "$(A$(B))" names "A$(B" and the
//     last ")" is plain text: references do not nest;
//   - a "$" that starts no reference stays: "$x", "${A}", a "$" at the
//     end, and an unclosed "$(" whose text is then read on as usual;
//   - a value is inserted as is, never expanded again.
func Expand(s string, lookup func(name string) (value string, ok bool)) string {
	if !strings.Contains(s, "$") {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 == len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch next := s[i+1]; next {
		case '$':
			b.WriteByte('$')
			i++
		case '(':
			end := strings.IndexByte(s[i+2:], ')')
			if end < 0 {
				// Unclosed: "$(" is text and reading goes on after it,
				// so a "$$" further on is still an escape.
				b.WriteString("$(")
				i++
				continue
			}
			name := s[i+2 : i+2+end]
			if v, ok := lookup(name); ok {
				b.WriteString(v)
			} else {
				b.WriteString(s[i : i+3+end])
			}
			i += 2 + end
		default:
			// "$" and the character after it are text. The kubelet reads
			// that character as a rune, so an invalid UTF-8 byte there
			// comes out as U+FFFD; doing the same keeps the two agents'
			// output byte for byte alike.
			r, size := utf8.DecodeRuneInString(s[i+1:])
			b.WriteByte('$')
			b.WriteRune(r)
			i += size
		}
	}
	return b.String()
}
