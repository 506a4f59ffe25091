package certs

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"
	"k8s.io/klog/v2"
)

// defaultReloadInterval is how often reloaded files are looked at when
// their directories cannot be watched; a stat per file, so cheap.
const defaultReloadInterval = 5 * time.Second

// Where the files' directories are watched (inotify), a change is looked
// at reloadSettle after the last event in them (a pair is written as two
// files, a secret volume swaps a symlink), and the files are looked at
// every watchedReloadInterval besides, as the kubelet's dynamic
// certificates do: an idle agent does not wake every few seconds to stat
// them.
const (
	reloadSettle          = 200 * time.Millisecond
	watchedReloadInterval = time.Minute
)

// fileStamp identifies a version of a file: a rewrite in place changes
// its modification time or size, an atomic replacement (a rename, or a
// Kubernetes secret volume's symlink swap) its inode.
type fileStamp struct {
	ino   uint64
	size  int64
	mtime time.Time
}

func stampOf(paths ...string) ([]fileStamp, error) {
	out := make([]fileStamp, 0, len(paths))
	for _, p := range paths {
		fi, err := os.Stat(p)
		if err != nil {
			return nil, err
		}
		s := fileStamp{size: fi.Size(), mtime: fi.ModTime()}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			s.ino = st.Ino
		}
		out = append(out, s)
	}
	return out, nil
}

func sameStamps(a, b []fileStamp) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].ino != b[i].ino || a[i].size != b[i].size || !a[i].mtime.Equal(b[i].mtime) {
			return false
		}
	}
	return true
}

// reloader holds a value loaded from files and loads it again when one
// of them changes. A file that is missing or does not load keeps the
// last good value, so a half-written pair never takes the server down.
type reloader[T any] struct {
	name     string
	paths    []string
	load     func() (T, error)
	interval time.Duration // without a watch
	// watchedInterval is the look at the files with a watch.
	watchedInterval time.Duration

	current atomic.Pointer[T]
	stamps  []fileStamp // Run's goroutine only, after construction
}

func newReloader[T any](name string, load func() (T, error), paths ...string) (*reloader[T], error) {
	r := &reloader[T]{name: name, paths: paths, load: load, interval: defaultReloadInterval, watchedInterval: watchedReloadInterval}
	stamps, err := stampOf(paths...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	v, err := load()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	r.stamps = stamps
	r.current.Store(&v)
	return r, nil
}

// reloadIfChanged loads the files again when their stamps changed and
// reports whether the value was replaced.
func (r *reloader[T]) reloadIfChanged() (bool, error) {
	stamps, err := stampOf(r.paths...)
	if err != nil {
		return false, err
	}
	if sameStamps(stamps, r.stamps) {
		return false, nil
	}
	v, err := r.load()
	if err != nil {
		return false, err
	}
	r.stamps = stamps
	r.current.Store(&v)
	return true, nil
}

func (r *reloader[T]) run(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithValues("files", r.paths)
	interval := r.interval
	var events <-chan fsnotify.Event
	var watchErrors <-chan error
	if w, err := r.watch(); err != nil {
		logger.V(2).Info("Not watching the files' directories; looking at the files every interval", "interval", interval, "err", err.Error())
	} else {
		defer w.Close()
		events, watchErrors, interval = w.Events, w.Errors, r.watchedInterval
	}
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	// The watch ended: back to looking every interval.
	unwatch := func() {
		events, watchErrors = nil, nil
		ticker.Reset(r.interval)
	}
	// A first look once the watch is on: a change since the files were
	// loaded may have come before it.
	settle := time.NewTimer(0)
	defer settle.Stop()
	var lastErr string
	for {
		select {
		case <-ctx.Done():
			return nil
		case _, ok := <-events:
			if ok {
				settle.Reset(reloadSettle)
			} else {
				unwatch()
			}
			continue
		case err, ok := <-watchErrors:
			if ok {
				logger.V(2).Info("Watching the files' directories", "err", err.Error())
			} else {
				unwatch()
			}
			continue
		case <-settle.C:
		case <-ticker.C:
		}
		changed, err := r.reloadIfChanged()
		switch {
		case err != nil:
			// Logged once per distinct error: a file being replaced is
			// briefly missing, and a broken one should not flood the log.
			if err.Error() != lastErr {
				logger.Error(err, "Failed to reload; keeping the previous one", "what", r.name)
				lastErr = err.Error()
			}
		case changed:
			lastErr = ""
			logger.Info("Reloaded", "what", r.name)
		}
	}
}

// watch watches the directories that hold the files: a file replaced by
// a rename or a symlink swap is a new inode, which a watch of the file
// itself would lose.
func (r *reloader[T]) watch() (*fsnotify.Watcher, error) {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, err
	}
	for _, p := range r.paths {
		if err := w.Add(filepath.Dir(p)); err != nil {
			w.Close()
			return nil, err
		}
	}
	return w, nil
}

// KeyPairFiles is a serving certificate read from tlsCertFile and
// tlsPrivateKeyFile and read again when either changes on disk.
type KeyPairFiles struct{ r *reloader[tls.Certificate] }

// NewKeyPairFiles loads the pair; a pair that does not load is an error.
func NewKeyPairFiles(certFile, keyFile string) (*KeyPairFiles, error) {
	r, err := newReloader("serving certificate", func() (tls.Certificate, error) {
		pair, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return pair, err
		}
		if pair.Leaf == nil && len(pair.Certificate) > 0 {
			pair.Leaf, _ = x509.ParseCertificate(pair.Certificate[0])
		}
		return pair, nil
	}, certFile, keyFile)
	if err != nil {
		return nil, err
	}
	return &KeyPairFiles{r: r}, nil
}

// Current is the pair last loaded.
func (k *KeyPairFiles) Current() *tls.Certificate { return k.r.current.Load() }

// Run reloads the pair on changes until ctx ends.
func (k *KeyPairFiles) Run(ctx context.Context) error { return k.r.run(ctx) }

// CABundleFile is a client CA bundle (authentication.x509.clientCAFile)
// read again when it changes on disk.
type CABundleFile struct{ r *reloader[*x509.CertPool] }

// NewCABundleFile loads the bundle; a file without a certificate is an
// error.
func NewCABundleFile(path string) (*CABundleFile, error) {
	r, err := newReloader("client CA bundle", func() (*x509.CertPool, error) {
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(data) {
			return nil, errors.New(path + " holds no PEM certificate")
		}
		return pool, nil
	}, path)
	if err != nil {
		return nil, err
	}
	return &CABundleFile{r: r}, nil
}

// Pool is the bundle last loaded.
func (c *CABundleFile) Pool() *x509.CertPool { return *c.r.current.Load() }

// Run reloads the bundle on changes until ctx ends.
func (c *CABundleFile) Run(ctx context.Context) error { return c.r.run(ctx) }
