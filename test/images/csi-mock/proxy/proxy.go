// Package proxy serves a CSI socket whose calls are answered by a driver elsewhere, which
// cannot be dialed but dials in: the hostpath plugin's -proxy-endpoint mode, which the
// upstream CSI Mock specs that install gRPC hooks deploy (csi-mock-proxy.yaml).
//
// Those specs run the mock driver inside e2e.test. e2e.test reaches the pod through the
// apiserver's port-forward (test/e2e/storage/drivers/proxy): it dials the pod's TCP port,
// up to ten connections kept open ahead of need, and serves gRPC on each connection it
// dialed, as a listener would serve the connections it accepted. So the driver's side is
// the one that dials, and the pod's side listens twice: on the unix socket the node agent
// and the sidecars dial, and on the TCP port. The proxy takes one connection from the
// socket, then one from the port, and copies bytes both ways until either side ends, when
// it closes both. A connection e2e.test dialed waits in the kernel's accept queue until a
// client comes; what e2e.test's gRPC server sent on it at once (its HTTP/2 settings) waits
// in its receive buffer and reaches the client first, as on any connection.
package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"k8s.io/klog/v2"

	"github.com/nodeagent/nodeagent/test/csi/endpoint"
)

// Config names the two listening ends.
type Config struct {
	// Endpoint is the CSI socket the node and the sidecars dial: a path or unix://path.
	Endpoint string
	// PeerEndpoint is where the driver's side dials in: tcp://[host]:port, or a unix
	// socket as Endpoint.
	PeerEndpoint string
}

// Proxy pairs the connections of its two listeners.
type Proxy struct {
	local, peer net.Listener
	// socketPath is the local socket, removed when Run returns.
	socketPath string
}

// Listen listens on both ends.
func Listen(cfg Config) (*Proxy, error) {
	local, path, err := endpoint.Listen(cfg.Endpoint)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", cfg.Endpoint, err)
	}
	peer, err := listenPeer(cfg.PeerEndpoint)
	if err != nil {
		local.Close()
		os.Remove(path)
		return nil, fmt.Errorf("listen on %s: %w", cfg.PeerEndpoint, err)
	}
	return &Proxy{local: local, peer: peer, socketPath: path}, nil
}

func listenPeer(ep string) (net.Listener, error) {
	if addr, ok := strings.CutPrefix(ep, "tcp://"); ok {
		if addr == "" {
			return nil, errors.New("no address")
		}
		return net.Listen("tcp", addr)
	}
	lis, _, err := endpoint.Listen(ep)
	return lis, err
}

// PeerAddr is the address the driver's side dials.
func (p *Proxy) PeerAddr() net.Addr { return p.peer.Addr() }

// Run pairs connections until ctx ends, then closes the listeners and every open pair,
// waits for the copying to stop and removes the socket.
func (p *Proxy) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	closeListeners := func() {
		p.local.Close()
		p.peer.Close()
	}
	stop := context.AfterFunc(ctx, closeListeners)
	defer stop()
	defer closeListeners()
	defer os.Remove(p.socketPath)
	var wg sync.WaitGroup
	defer wg.Wait()
	logger.Info("Proxying CSI calls", "socket", p.socketPath, "peer", p.peer.Addr())
	for n := 1; ; n++ {
		client := accept(ctx, p.local)
		if client == nil {
			return closed(ctx)
		}
		// The peer's connection is taken only now that a client needs it: the ones the
		// driver's side dialed ahead wait in the accept queue meanwhile.
		peer := accept(ctx, p.peer)
		if peer == nil {
			client.Close()
			return closed(ctx)
		}
		logger.V(3).Info("Paired a connection", "pair", n)
		wg.Add(1)
		go func() {
			defer wg.Done()
			splice(ctx, logger.WithValues("pair", n), client, peer)
		}()
	}
}

// closed is Run's result once a listener is closed: nil when ctx ended, which is what
// closes them.
func closed(ctx context.Context) error {
	if ctx.Err() != nil {
		return nil
	}
	return errors.New("a listener closed")
}

// accept returns the listener's next connection, or nil once the listener is closed
// (Run closes both when ctx ends). Other failures, such as running out of file
// descriptors, are retried.
func accept(ctx context.Context, lis net.Listener) net.Conn {
	for {
		c, err := lis.Accept()
		if err == nil {
			return c
		}
		if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
			return nil
		}
		klog.FromContext(ctx).Error(err, "Accept failed", "listener", lis.Addr())
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// splice copies a to b and b to a until either direction ends or ctx does, then closes
// both, so that the other direction ends too: a gRPC connection is useless half closed.
func splice(ctx context.Context, logger klog.Logger, a, b net.Conn) {
	closeBoth := sync.OnceFunc(func() {
		a.Close()
		b.Close()
	})
	stop := context.AfterFunc(ctx, closeBoth)
	defer stop()
	done := make(chan struct{}, 2)
	copyTo := func(dst, src net.Conn, dir string) {
		n, err := io.Copy(dst, src)
		closeBoth()
		logger.V(5).Info("Copied", "direction", dir, "bytes", n, "err", err)
		done <- struct{}{}
	}
	go copyTo(b, a, "client to peer")
	go copyTo(a, b, "peer to client")
	<-done
	<-done
}
