package certs

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	certutil "k8s.io/client-go/util/cert"
	"k8s.io/klog/v2"

	"github.com/nodeagent/nodeagent/pkg/atomicfile"
)

// pairTimeLayout names a stored pair after the time it was written, the
// kubelet's layout (in local time, as the kubelet writes it).
const pairTimeLayout = "2006-01-02-15-04-05"

// pairStore keeps certificate/key pairs in dir the kubelet's way:
// <prefix>-<time>.pem holds a certificate (with any intermediates) and
// its key, mode 0600, and the symlink <prefix>-current.pem names the
// newest. Old pairs are left in place, as the kubelet leaves them.
type pairStore struct {
	dir    string
	prefix string
	// certFile and keyFile are read when there is no current pair: the
	// kubeconfig's own files. Empty means none.
	certFile, keyFile string
}

func newPairStore(dir, prefix, certFile, keyFile string) *pairStore {
	return &pairStore{dir: dir, prefix: prefix, certFile: certFile, keyFile: keyFile}
}

// currentPath is the symlink that names the newest pair.
func (s *pairStore) currentPath() string {
	return filepath.Join(s.dir, s.prefix+"-current.pem")
}

// updatingPath is where the next symlink is made before it is renamed
// over currentPath; the kubelet uses the same name.
func (s *pairStore) updatingPath() string {
	return filepath.Join(s.dir, s.prefix+"-updated.pem")
}

// load returns the current pair, else the certFile/keyFile pair, else
// nil. A pair that is missing, behind a dangling symlink, or does not
// load is logged and skipped: the caller then requests a new one rather
// than refusing to start.
func (s *pairStore) load(logger klog.Logger) *tls.Certificate {
	s.recover(logger)
	if cert, err := loadPair(s.currentPath(), s.currentPath()); err == nil {
		return cert
	} else if !errors.Is(err, os.ErrNotExist) {
		logger.Error(err, "Ignoring unusable certificate", "path", s.currentPath())
	} else if _, lerr := os.Lstat(s.currentPath()); lerr == nil {
		logger.Info("Ignoring dangling certificate symlink", "path", s.currentPath())
	}
	if s.certFile == "" || s.keyFile == "" {
		return nil
	}
	cert, err := loadPair(s.certFile, s.keyFile)
	switch {
	case err == nil:
		return cert
	case !errors.Is(err, os.ErrNotExist):
		logger.Error(err, "Ignoring unusable certificate", "certFile", s.certFile, "keyFile", s.keyFile)
	}
	return nil
}

// recover finishes a symlink swap that stopped before its rename (the
// kubelet removes the current link first, so it can leave only the new
// one behind).
func (s *pairStore) recover(logger klog.Logger) {
	if _, err := os.Lstat(s.currentPath()); !errors.Is(err, os.ErrNotExist) {
		return
	}
	fi, err := os.Lstat(s.updatingPath())
	if err != nil || fi.Mode()&os.ModeSymlink == 0 {
		return
	}
	if err := os.Rename(s.updatingPath(), s.currentPath()); err != nil {
		logger.Error(err, "Failed to recover an interrupted certificate update", "path", s.updatingPath())
	}
}

// update writes a new pair, named after now, and points the current
// symlink at it. The file is written under a temporary name and renamed,
// and the symlink is replaced by a rename, so a reader sees the old pair
// or the new one, never a part.
func (s *pairStore) update(certPEM, keyPEM []byte, now time.Time) (*tls.Certificate, error) {
	certs, err := certutil.ParseCertsPEM(certPEM)
	if err != nil {
		return nil, fmt.Errorf("store certificate: %w", err)
	}
	keyBlock, _ := pem.Decode(keyPEM)
	if keyBlock == nil {
		return nil, errors.New("store certificate: the key is not PEM")
	}
	var data []byte
	for _, c := range certs {
		data = append(data, pemEncode("CERTIFICATE", c.Raw)...)
	}
	data = append(data, pem.EncodeToMemory(keyBlock)...)
	cert, err := parsePair(data, data)
	if err != nil {
		return nil, fmt.Errorf("store certificate: %w", err)
	}
	if err := os.MkdirAll(s.dir, 0o755); err != nil {
		return nil, fmt.Errorf("store certificate: %w", err)
	}
	path, err := filepath.Abs(filepath.Join(s.dir, s.prefix+"-"+now.Format(pairTimeLayout)+".pem"))
	if err != nil {
		return nil, fmt.Errorf("store certificate: %w", err)
	}
	if err := atomicfile.Write(path, data, 0o600); err != nil {
		return nil, fmt.Errorf("store certificate: %w", err)
	}
	if err := os.Remove(s.updatingPath()); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("store certificate: %w", err)
	}
	if err := os.Symlink(path, s.updatingPath()); err != nil {
		return nil, fmt.Errorf("store certificate: %w", err)
	}
	if err := os.Rename(s.updatingPath(), s.currentPath()); err != nil {
		return nil, fmt.Errorf("store certificate: %w", err)
	}
	return cert, nil
}

// loadPair reads a certificate and key, which may be one file.
func loadPair(certFile, keyFile string) (*tls.Certificate, error) {
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		return nil, err
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, err
	}
	return parsePair(certPEM, keyPEM)
}

// parsePair is tls.X509KeyPair with the leaf certificate parsed, which
// the rotation reads its validity from.
func parsePair(certPEM, keyPEM []byte) (*tls.Certificate, error) {
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, err
	}
	if pair.Leaf == nil {
		if pair.Leaf, err = x509.ParseCertificate(pair.Certificate[0]); err != nil {
			return nil, err
		}
	}
	return &pair, nil
}
