package endpoint

import "testing"

func TestSocketPath(t *testing.T) {
	for in, want := range map[string]string{
		"unix:///csi/csi.sock": "/csi/csi.sock",
		"unix:/csi/csi.sock":   "/csi/csi.sock",
		"/csi/csi.sock":        "/csi/csi.sock",
		"tcp://127.0.0.1:9000": "",
		"unix://":              "",
	} {
		got, err := SocketPath(in)
		if got != want || (want == "") != (err != nil) {
			t.Errorf("SocketPath(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}
