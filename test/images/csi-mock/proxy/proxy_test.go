package proxy

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// startProxy runs a proxy on a socket in a temporary directory and a TCP port of the
// loopback; the returned function stops it and waits for Run.
func startProxy(t *testing.T) (socket string, peer string, stop func()) {
	t.Helper()
	socket = filepath.Join(t.TempDir(), "csi.sock")
	p, err := Listen(Config{Endpoint: socket, PeerEndpoint: "tcp://127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return socket, p.PeerAddr().String(), stop
}

// dialedListener is e2e.test's side: a net.Listener whose connections are ones it dialed
// to the pod's port (drivers/proxy.Listen), here directly instead of through port-forward.
type dialedListener struct {
	conns chan net.Conn
	addr  net.Addr
	done  chan struct{}
	once  sync.Once
}

func dialAhead(t *testing.T, addr string, n int) *dialedListener {
	t.Helper()
	l := &dialedListener{conns: make(chan net.Conn, n), done: make(chan struct{})}
	for range n {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		l.addr = c.LocalAddr()
		l.conns <- c
	}
	return l
}

func (l *dialedListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *dialedListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *dialedListener) Addr() net.Addr { return l.addr }

type identity struct {
	csi.UnimplementedIdentityServer
}

func (identity) GetPluginInfo(context.Context, *csi.GetPluginInfoRequest) (*csi.GetPluginInfoResponse, error) {
	return &csi.GetPluginInfoResponse{Name: "csi-mock-e2e"}, nil
}

// TestGRPCThroughProxy plays the CSI Mock specs' embedded driver: e2e.test dials the pod's
// port ahead of need and serves gRPC on what it dialed; a client of the pod's socket (the
// registrar, a sidecar, the node agent) reaches that server through the proxy, one
// connection after another.
func TestGRPCThroughProxy(t *testing.T) {
	socket, peer, stop := startProxy(t)
	l := dialAhead(t, peer, 3)
	srv := grpc.NewServer()
	csi.RegisterIdentityServer(srv, identity{})
	go srv.Serve(l)
	// The proxy first: its end closed, the connection no client took fails the server's
	// handshake, which Stop waits for.
	defer srv.Stop()
	defer stop()

	for i := range 2 {
		conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		resp, err := csi.NewIdentityClient(conn).GetPluginInfo(ctx, &csi.GetPluginInfoRequest{})
		cancel()
		if err != nil || resp.GetName() != "csi-mock-e2e" {
			t.Fatalf("client %d: GetPluginInfo = %v, %v", i, resp, err)
		}
		conn.Close()
	}
}

// TestPairing: bytes the far side sent before any client came reach the first client;
// each client gets a connection of its own; one side closing closes the other.
func TestPairing(t *testing.T) {
	socket, peer, stop := startProxy(t)
	far1, err := net.Dial("tcp", peer)
	if err != nil {
		t.Fatal(err)
	}
	defer far1.Close()
	if _, err := far1.Write([]byte("settings")); err != nil {
		t.Fatal(err)
	}
	far2, err := net.Dial("tcp", peer)
	if err != nil {
		t.Fatal(err)
	}
	defer far2.Close()

	client1, err := net.Dial("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	defer client1.Close()
	expectRead(t, client1, "settings")
	if _, err := client1.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	expectRead(t, far1, "ping")

	client2, err := net.Dial("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	defer client2.Close()
	if _, err := far2.Write([]byte("second")); err != nil {
		t.Fatal(err)
	}
	expectRead(t, client2, "second")

	client1.Close()
	expectEOF(t, far1)
	far2.Close()
	expectEOF(t, client2)

	stop()
	if _, err := os.Stat(socket); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket after Run: %v, want it removed", err)
	}
}

// TestStopClosesPairs: when Run's context ends, open pairs are closed.
func TestStopClosesPairs(t *testing.T) {
	socket, peer, stop := startProxy(t)
	far, err := net.Dial("tcp", peer)
	if err != nil {
		t.Fatal(err)
	}
	defer far.Close()
	client, err := net.Dial("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	if _, err := client.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	expectRead(t, far, "x")
	stop()
	expectEOF(t, far)
	expectEOF(t, client)
}

func TestListenRefusesBadPeer(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "csi.sock")
	if _, err := Listen(Config{Endpoint: socket, PeerEndpoint: "tcp://"}); err == nil {
		t.Error("a peer endpoint without an address was taken")
	}
	if _, err := os.Stat(socket); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket after a failed Listen: %v, want it removed", err)
	}
}

func expectRead(t *testing.T, c net.Conn, want string) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, len(want))
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != want {
		t.Fatalf("read %q, %v; want %q", buf, err, want)
	}
}

func expectEOF(t *testing.T, c net.Conn) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatalf("read %d bytes, want the connection closed", n)
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("the connection stayed open")
	}
}
