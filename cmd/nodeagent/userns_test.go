package main

import (
	"strings"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func TestHandlerSupportsUserNamespaces(t *testing.T) {
	st := &runtimeapi.StatusResponse{RuntimeHandlers: []*runtimeapi.RuntimeHandler{
		{Name: "", Features: &runtimeapi.RuntimeHandlerFeatures{UserNamespaces: true}},
		{Name: "runc", Features: &runtimeapi.RuntimeHandlerFeatures{UserNamespaces: true}},
		{Name: "old", Features: &runtimeapi.RuntimeHandlerFeatures{}},
		{Name: "bare"},
	}}
	for handler, want := range map[string]bool{"": true, "runc": true, "old": false, "bare": false} {
		if got, err := handlerSupportsUserNamespaces(st, handler); err != nil || got != want {
			t.Errorf("handler %q: %v %v, want %v", handler, got, err, want)
		}
	}
	if _, err := handlerSupportsUserNamespaces(st, "kata"); err == nil || !strings.Contains(err.Error(), `the handler "kata" is not known`) {
		t.Errorf("an unknown handler: %v", err)
	}
}
