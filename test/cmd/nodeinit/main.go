// Command nodeinit is PID 1 of one harness node that lives in namespaces of its own: the
// harness starts it in new mount, PID, network and UTS namespaces, and it makes the node's
// view of the machine, then starts the node's daemons on request and reaps them.
//
// The view: a private mount tree, a /proc of the node's PID namespace, a /sys of its
// network namespace (with the machine's cgroup hierarchies where they were), tmpfs where
// runtimes keep per-machine state outside their configured dirs (/var/lib/cni,
// /run/containerd), and each of the node's own directories bound over the path the first
// node uses for it, so that every node finds its files at the same paths.
//
// The harness asks for a daemon over a unix socket: one JSON request a connection, one JSON
// answer with the daemon's pid in the node's PID namespace. When a daemon exits, nodeinit
// writes how it ended to the file the request named. SIGTERM stops the daemons (SIGTERM,
// then SIGKILL after a grace period) and exits; the harness's SIGKILL of nodeinit ends every
// process of the node at once, as the kernel ends a PID namespace with its init.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Request starts one daemon of the node.
type Request struct {
	Bin      string   `json:"bin"`
	Args     []string `json:"args"`
	Env      []string `json:"env"`
	Log      string   `json:"log"`      // appended to
	ExitFile string   `json:"exitFile"` // written with how the daemon ended
}

// Reply is the daemon's pid in the node's PID namespace, or why it did not start.
type Reply struct {
	Pid   int    `json:"pid,omitempty"`
	Error string `json:"error,omitempty"`
}

func main() {
	hostname := flag.String("hostname", "", "the node's hostname")
	socket := flag.String("socket", "", "unix socket to serve start requests on")
	detach := flag.String("detach", "", "detach every mount inherited from the machine at or below this dir")
	var binds bindFlags
	flag.Var(&binds, "bind", "SRC:DST: bind the node's own SRC over DST (repeatable)")
	flag.Parse()
	if err := setup(*hostname, *detach, binds); err != nil {
		fmt.Fprintln(os.Stderr, "nodeinit:", err)
		os.Exit(1)
	}
	if err := serve(*socket); err != nil {
		fmt.Fprintln(os.Stderr, "nodeinit:", err)
		os.Exit(1)
	}
}

type bindFlags [][2]string

func (b *bindFlags) String() string { return fmt.Sprint(*b) }
func (b *bindFlags) Set(v string) error {
	src, dst, ok := strings.Cut(v, ":")
	if !ok || !filepath.IsAbs(src) || !filepath.IsAbs(dst) {
		return fmt.Errorf("%q: want SRC:DST, both absolute", v)
	}
	*b = append(*b, [2]string{src, dst})
	return nil
}

func setup(hostname, detach string, binds bindFlags) error {
	if os.Getpid() != 1 {
		return fmt.Errorf("must run as PID 1 of a new PID namespace (pid %d)", os.Getpid())
	}
	// Nothing mounted here may reach the machine's mount table, and nothing mounted there
	// later reaches the node's.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make / private: %w", err)
	}
	// The copies of the machine's mounts below the run dir (another node's pod volumes, say)
	// would hold those file systems busy after the machine unmounts them.
	if detach != "" {
		if err := detachBelow(detach); err != nil {
			return err
		}
	}
	if hostname != "" {
		if err := unix.Sethostname([]byte(hostname)); err != nil {
			return fmt.Errorf("hostname: %w", err)
		}
	}
	if err := unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mount /proc: %w", err)
	}
	for _, dir := range []string{"/var/lib/cni", "/run/containerd"} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755"); err != nil {
			return fmt.Errorf("tmpfs on %s: %w", dir, err)
		}
	}
	if err := remountSys(); err != nil {
		return err
	}
	for _, b := range binds {
		for _, d := range b {
			if err := os.MkdirAll(d, 0o755); err != nil {
				return err
			}
		}
		if err := unix.Mount(b[0], b[1], "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("bind %s over %s: %w", b[0], b[1], err)
		}
	}
	return nil
}

// detachBelow lazily unmounts every mount at or below dir, deepest first, until none is left.
func detachBelow(dir string) error {
	for range 10 {
		data, err := os.ReadFile("/proc/self/mountinfo")
		if err != nil {
			return err
		}
		var points []string
		for _, line := range strings.Split(string(data), "\n") {
			fields := strings.Fields(line)
			if len(fields) < 5 {
				continue
			}
			p := unescape(fields[4])
			if p == dir || strings.HasPrefix(p, dir+"/") {
				points = append(points, p)
			}
		}
		if len(points) == 0 {
			return nil
		}
		sort.Slice(points, func(i, j int) bool { return len(points[i]) > len(points[j]) })
		for _, p := range points {
			_ = unix.Unmount(p, unix.MNT_DETACH)
		}
	}
	return fmt.Errorf("mounts remain below %s", dir)
}

// unescape undoes mountinfo's octal escapes (\040 for a space).
func unescape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// remountSys mounts a sysfs of the node's network namespace on /sys, so that
// /sys/class/net lists the node's interfaces, and puts the cgroup hierarchies back below it.
func remountSys() error {
	// On the node's own tmpfs: nothing of it shows on the machine, even if this fails.
	keep, err := os.MkdirTemp("/run/containerd", "nodeinit-cgroup-")
	if err != nil {
		return err
	}
	if err := unix.Mount("/sys/fs/cgroup", keep, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("keep /sys/fs/cgroup: %w", err)
	}
	if err := unix.Mount("/sys", "/sys", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return err
	}
	if err := unix.Unmount("/sys", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("unmount /sys: %w", err)
	}
	if err := unix.Mount("sysfs", "/sys", "sysfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mount /sys: %w", err)
	}
	if err := unix.Mount(keep, "/sys/fs/cgroup", "", unix.MS_MOVE, ""); err != nil {
		return fmt.Errorf("move cgroups back: %w", err)
	}
	return os.Remove(keep)
}

type daemons struct {
	mu    sync.Mutex
	exits map[int]string // pid → exit file
}

func serve(socket string) error {
	d := &daemons{exits: map[int]string{}}
	chld := make(chan os.Signal, 16)
	signal.Notify(chld, syscall.SIGCHLD)
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM, syscall.SIGINT)
	_ = os.Remove(socket)
	l, err := net.Listen("unix", socket)
	if err != nil {
		return err
	}
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			go d.handle(conn)
		}
	}()
	for {
		select {
		case <-chld:
			d.reap()
		case <-term:
			l.Close()
			d.stopAll(20 * time.Second)
			return nil
		}
	}
}

// reap collects every exited child: the daemons it started and the orphans the node's PID
// namespace hands to its init.
func (d *daemons) reap() {
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
		d.mu.Lock()
		file, ok := d.exits[pid]
		delete(d.exits, pid)
		d.mu.Unlock()
		if ok && file != "" {
			_ = os.WriteFile(file, []byte(describe(ws)), 0o644)
		}
	}
}

// describe says how a process ended in the words of Go's os.ProcessState.
func describe(ws unix.WaitStatus) string {
	switch {
	case ws.Exited():
		return fmt.Sprintf("exit status %d", ws.ExitStatus())
	case ws.Signaled():
		return "signal: " + ws.Signal().String()
	}
	return fmt.Sprintf("wait status %d", ws)
}

func (d *daemons) handle(conn net.Conn) {
	defer conn.Close()
	var req Request
	var reply Reply
	if err := json.NewDecoder(bufio.NewReader(conn)).Decode(&req); err != nil {
		reply.Error = "bad request: " + err.Error()
	} else if pid, err := d.start(req); err != nil {
		reply.Error = err.Error()
	} else {
		reply.Pid = pid
	}
	_ = json.NewEncoder(conn).Encode(reply)
}

func (d *daemons) start(req Request) (int, error) {
	logf, err := os.OpenFile(req.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return 0, err
	}
	defer logf.Close()
	cmd := exec.Command(req.Bin, req.Args...)
	cmd.Env = append(os.Environ(), req.Env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	fmt.Fprintf(logf, "---- %s started by nodeinit: %s %s\n", time.Now().Format(time.RFC3339), req.Bin, strings.Join(req.Args, " "))
	// Hold the reaper off until the pid is recorded, so an instant exit is still reported.
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	if req.ExitFile != "" {
		_ = os.Remove(req.ExitFile)
	}
	d.exits[cmd.Process.Pid] = req.ExitFile
	return cmd.Process.Pid, nil
}

// stopAll sends SIGTERM to every process of the node, waits up to grace for them to go,
// then SIGKILLs what is left.
func (d *daemons) stopAll(grace time.Duration) {
	_ = unix.Kill(-1, unix.SIGTERM)
	deadline := time.Now().Add(grace)
	for time.Now().Before(deadline) {
		d.reap()
		if !anyChildren() {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	_ = unix.Kill(-1, unix.SIGKILL)
}

func anyChildren() bool {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		if e.Name() != "1" && e.Name()[0] >= '0' && e.Name()[0] <= '9' {
			return true
		}
	}
	return false
}
