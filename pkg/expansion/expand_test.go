package expansion

import "testing"

func TestExpand(t *testing.T) {
	vars := map[string]string{"A": "a", "B": "b", "REF": "$(A)", "EMPTY": "", "A$(B": "odd"}
	lookup := func(name string) (string, bool) {
		v, ok := vars[name]
		return v, ok
	}
	for _, tc := range []struct {
		name, in, want string
	}{
		{name: "no reference", in: "plain", want: "plain"},
		{name: "empty input", in: "", want: ""},
		{name: "whole string", in: "$(A)", want: "a"},
		{name: "repeated and embedded", in: "x$(A)y$(A)-$(B)", want: "xaya-b"},
		{name: "value not expanded again", in: "$(REF)", want: "$(A)"},
		{name: "empty value", in: "foo$(EMPTY)bar", want: "foobar"},
		{name: "undefined stays", in: "$(MISSING)", want: "$(MISSING)"},
		{name: "escape", in: "$$(A)", want: "$(A)"},
		{name: "escape then reference", in: "$$$(A)", want: "$a"},
		{name: "escape then reference, undefined", in: "$$$(NOPE)", want: "$$(NOPE)"},
		{name: "escapes only", in: "$$$$", want: "$$"},
		{name: "escape before a name", in: "f000-$$A", want: "f000-$A"},
		{name: "six escapes then reference", in: "$$$$$$$(A)", want: "$$$a"},
		{name: "lone dollar", in: "$", want: "$"},
		{name: "trailing dollar", in: "$(A)foo$", want: "afoo$"},
		{name: "dollar and a letter", in: "$x$(A)", want: "$xa"},
		{name: "shell syntax is text", in: "${A} $? $!", want: "${A} $? $!"},
		{name: "missing opener", in: "$A)", want: "$A)"},
		{name: "unclosed", in: "$(A", want: "$(A"},
		{name: "unclosed at the end", in: "$(A)___$(", want: "a___$("},
		{name: "many unclosed", in: "--$($($($($--", want: "--$($($($($--"},
		{name: "unclosed, later escape still read", in: "$(A$$", want: "$(A$"},
		{name: "empty name", in: "$()", want: "$()"},
		{name: "nested: name runs to the first closer", in: "$($(A))", want: "$($(A))"},
		{name: "nested name can be defined", in: "$(A$(B))", want: "odd)"},
		{name: "escape inside a name is not an escape", in: "$(x$$y)", want: "$(x$$y)"},
		{name: "backslash is text", in: `foo\$(A)bar`, want: `foo\abar`},
		{name: "multi-byte text", in: "é$(A)é", want: "éaé"},
		{name: "dollar before a multi-byte rune", in: "prefix-$€-$中文", want: "prefix-$€-$中文"},
		{name: "dollar before an invalid byte", in: "$\xff$(A)", want: "$\uFFFDa"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Expand(tc.in, lookup); got != tc.want {
				t.Errorf("Expand(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}
