package stats

import (
	"io/fs"

	"golang.org/x/sys/unix"
)

// readSmall appends the content of the file at path to b, with the
// system's open, read and close alone. The files it is for (cgroup and
// proc files, a few hundred bytes each) are read by every pass of the
// eviction manager and the housekeeping; os.Open would register each with
// the runtime's poller (a fcntl and two epoll_ctl calls), which doubles the
// system calls of the read, each of them dear on a virtual machine.
// Errors are *fs.PathError of the errno, so errors.Is(err,
// fs.ErrNotExist) holds as with os.Open.
func readSmall(path string, b []byte) ([]byte, error) {
	var fd int
	var err error
	for {
		fd, err = unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		return b, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := unix.Read(fd, b[len(b):cap(b)])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return b, &fs.PathError{Op: "read", Path: path, Err: err}
		}
		if n == 0 {
			return b, nil
		}
		b = b[:len(b)+n]
	}
}
