package runtime

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"
)

func TestPeerPID(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "cri.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	pid, err := PeerPID(context.Background(), "unix://"+sock)
	if err != nil {
		t.Fatal(err)
	}
	if pid != os.Getpid() {
		t.Errorf("peer pid = %d, want this process, %d", pid, os.Getpid())
	}
	if _, err := PeerPID(context.Background(), "unix://"+sock+".missing"); err == nil {
		t.Error("a missing socket has a peer")
	}
}
