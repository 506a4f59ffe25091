package harness

import (
	"reflect"
	"testing"
)

func TestAlignEdits(t *testing.T) {
	mods := parseModuleList(`k8s.io/api v0.35.4
k8s.io/client-go v0.36.1 => k8s.io/client-go v0.36.1
k8s.io/cri-api v0.0.0 => k8s.io/cri-api v0.36.1
example.com/local v1.0.0 => ../local
golang.org/x/net v0.56.0
google.golang.org/grpc v1.80.0
github.com/only/here v1.2.3
`)
	base := selected(parseModuleList(`k8s.io/api v0.0.0 => k8s.io/api v0.37.1
k8s.io/client-go v0.37.1
k8s.io/cri-api v0.36.1
example.com/local v1.1.0
golang.org/x/net v0.55.0
google.golang.org/grpc v1.82.1
github.com/only/there v1.0.0
`))
	if base["k8s.io/api"] != "v0.37.1" {
		t.Errorf("a replaced module's selected version = %q, want its replacement's v0.37.1", base["k8s.io/api"])
	}
	got := alignEdits(mods, base, false)
	want := []string{
		"-replace=k8s.io/client-go=k8s.io/client-go@v0.37.1", // replaced: replaced by base's version
		"-require=google.golang.org/grpc@v1.82.1",            // older here: raised
		"-require=k8s.io/api@v0.37.1",
		// golang.org/x/net: newer here, kept; k8s.io/cri-api: the same; example.com/local:
		// replaced by a directory; github.com/only/*: in one list only.
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("alignEdits =\n%q\nwant\n%q", got, want)
	}
	// Exact: every module of both lists at base's version, newer ones here brought down.
	got = alignEdits(mods, base, true)
	want = []string{
		"-replace=golang.org/x/net=golang.org/x/net@v0.55.0",
		"-replace=google.golang.org/grpc=google.golang.org/grpc@v1.82.1",
		"-replace=k8s.io/api=k8s.io/api@v0.37.1",
		"-replace=k8s.io/client-go=k8s.io/client-go@v0.37.1",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("alignEdits exact =\n%q\nwant\n%q", got, want)
	}
}
