package pullrecords

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
)

// The kubelet's directories under the root dir, and its file naming: a
// file per image (intents) or image ID (records), named "sha256-" and the
// hex SHA-256 of that string, written through a ".tmp" file.
const (
	pullingDir = "image_manager/pulling"
	pulledDir  = "image_manager/pulled"
	filePrefix = "sha256-"
	tmpSuffix  = ".tmp"
)

// The files hold the kubelet's own record kinds, as JSON.
const (
	apiVersion  = "kubelet.config.k8s.io/v1beta1"
	kindIntent  = "ImagePullIntent"
	kindPulled  = "ImagePulledRecord"
	dirFileMode = 0o700
)

// store reads and writes the records on disk; it does no locking (the
// Tracker serializes its use).
type store struct {
	pulling, pulled string
}

func openStore(rootDir string) (*store, error) {
	s := &store{pulling: filepath.Join(rootDir, pullingDir), pulled: filepath.Join(rootDir, pulledDir)}
	for _, dir := range []string{s.pulling, s.pulled} {
		if err := os.MkdirAll(dir, dirFileMode); err != nil {
			return nil, fmt.Errorf("pull records: %w", err)
		}
	}
	return s, nil
}

func fileName(key string) string {
	sum := sha256.Sum256([]byte(key))
	return filePrefix + hex.EncodeToString(sum[:])
}

// writeIntent records that image is about to be pulled.
func (s *store) writeIntent(image string) error {
	return writeJSON(s.pulling, fileName(image), &kubeletv1beta1.ImagePullIntent{Image: image})
}

func (s *store) deleteIntent(image string) error {
	return removeFile(filepath.Join(s.pulling, fileName(image)))
}

// intentExists says whether a readable intent for image is on disk.
func (s *store) intentExists(image string) (bool, error) {
	var in kubeletv1beta1.ImagePullIntent
	ok, err := readJSON(filepath.Join(s.pulling, fileName(image)), kindIntent, &in)
	return ok && in.Image == image, err
}

// intents lists the images of every readable intent; unreadable files are
// reported in the error and skipped.
func (s *store) intents() ([]string, error) {
	var out []string
	err := eachFile(s.pulling, func(path string) error {
		var in kubeletv1beta1.ImagePullIntent
		if _, err := readJSON(path, kindIntent, &in); err != nil {
			return err
		}
		out = append(out, in.Image)
		return nil
	})
	return out, err
}

// record returns the pulled record of imageRef; nil without error when
// there is none. A file that cannot be read is an error.
func (s *store) record(imageRef string) (*kubeletv1beta1.ImagePulledRecord, error) {
	var rec kubeletv1beta1.ImagePulledRecord
	ok, err := readJSON(filepath.Join(s.pulled, fileName(imageRef)), kindPulled, &rec)
	if err != nil || !ok || rec.ImageRef != imageRef {
		return nil, err
	}
	return &rec, nil
}

func (s *store) writeRecord(rec *kubeletv1beta1.ImagePulledRecord) error {
	return writeJSON(s.pulled, fileName(rec.ImageRef), rec)
}

func (s *store) deleteRecord(imageRef string) error {
	return removeFile(filepath.Join(s.pulled, fileName(imageRef)))
}

// records lists every readable pulled record.
func (s *store) records() ([]*kubeletv1beta1.ImagePulledRecord, error) {
	var out []*kubeletv1beta1.ImagePulledRecord
	err := eachFile(s.pulled, func(path string) error {
		var rec kubeletv1beta1.ImagePulledRecord
		if _, err := readJSON(path, kindPulled, &rec); err != nil {
			return err
		}
		out = append(out, &rec)
		return nil
	})
	return out, err
}

// writeJSON replaces dir/name with obj as a whole: a crash leaves the old
// file or the new one, never a part (at worst a stray ".tmp", ignored).
func writeJSON(dir, name string, obj any) error {
	switch o := obj.(type) {
	case *kubeletv1beta1.ImagePullIntent:
		o.APIVersion, o.Kind = apiVersion, kindIntent
	case *kubeletv1beta1.ImagePulledRecord:
		o.APIVersion, o.Kind = apiVersion, kindPulled
	}
	data, err := json.Marshal(obj)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, dirFileMode); err != nil {
		return err
	}
	path := filepath.Join(dir, name)
	tmp := path + tmpSuffix
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// readJSON reads path into obj; false without error when the file does
// not exist. A file of another kind or version is an error.
func readJSON(path, kind string, obj any) (bool, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	var meta struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
	}
	if err := json.Unmarshal(data, &meta); err != nil {
		return true, fmt.Errorf("read %s: %w", path, err)
	}
	if meta.APIVersion != apiVersion || meta.Kind != kind {
		return true, fmt.Errorf("read %s: %s %s, want %s %s", path, meta.APIVersion, meta.Kind, apiVersion, kind)
	}
	if err := json.Unmarshal(data, obj); err != nil {
		return true, fmt.Errorf("read %s: %w", path, err)
	}
	return true, nil
}

func removeFile(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// eachFile calls fn with every record file in dir (not ".tmp" ones nor
// anything the store did not name) and joins the errors.
func eachFile(dir string, fn func(path string) error) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasPrefix(name, filePrefix) || strings.HasSuffix(name, tmpSuffix) {
			continue
		}
		if err := fn(filepath.Join(dir, name)); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
