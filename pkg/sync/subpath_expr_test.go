package sync

import (
	"strings"
	"testing"
)

// TestExpandSubPathExpr covers what subPathExpr adds to the shared
// $(VAR) expansion (pkg/expansion): missing values and the path checks.
func TestExpandSubPathExpr(t *testing.T) {
	env := map[string]string{"POD": "web-0", "NS": "ns", "EMPTY": "", "UP": "..", "ABS": "/etc"}
	for _, tc := range []struct {
		name, expr, want, wantErr string
	}{
		{name: "plain", expr: "logs", want: "logs"},
		{name: "references", expr: "$(NS)/$(POD)/logs", want: "ns/web-0/logs"},
		{name: "escape is not a reference", expr: "$$(POD)", want: "$(POD)"},
		{name: "unclosed is text", expr: "a$(POD", want: "a$(POD"},
		{name: "undefined", expr: "logs/$(NOPE)", wantErr: "missing value for NOPE"},
		{name: "empty", expr: "logs/$(EMPTY)", wantErr: "missing value for EMPTY"},
		{name: "every missing name once, sorted", expr: "$(Z)/$(EMPTY)/$(Z)", wantErr: "missing value for EMPTY, Z"},
		{name: "empty name", expr: "a/$()", wantErr: "missing value for "},
		{name: "value climbs out", expr: "$(UP)/x", wantErr: "must not contain '..'"},
		{name: "value is absolute", expr: "$(ABS)", wantErr: "absolute path"},
		{name: "dots inside a name are fine", expr: "a..b/$(POD)", want: "a..b/web-0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := expandSubPathExpr(tc.expr, env)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("expandSubPathExpr(%q) = %q, %v; want error %q", tc.expr, got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("expandSubPathExpr(%q) = %q, %v; want %q", tc.expr, got, err, tc.want)
			}
		})
	}
}
