package volume

import (
	"crypto/sha256"
	"encoding/binary"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"

	"k8s.io/apimachinery/pkg/types"

	"github.com/nodeagent/nodeagent/pkg/volume/atomic"
)

// publishedPayloads remembers, for each configMap, secret, downward API and projected
// volume, the payload last published into its directory and the version directory that
// holds it. A refresh (every pod's, once a minute) whose payload is the one published,
// with ..data still naming that version, reads and writes nothing more: one readlink
// instead of a walk of the volume comparing every file. At 100 pods the walks were a
// fifth of the agent's CPU with the pods running. A version replaced or removed behind
// the agent's back (..data gone or pointing elsewhere, the tmpfs unmounted) fails the
// readlink's check and is published again, as before (so does a publish that failed after
// replacing ..data: the version recorded is no longer the one named); a file changed inside
// the version directory by hand is not looked for.
type publishedPayloads struct {
	mu   sync.Mutex
	pods map[types.UID]map[string]publishedVersion // by pod, by volume directory
}

type publishedVersion struct {
	digest  [sha256.Size]byte
	version string // the version directory's name, what ..data points to
}

// current says whether dir holds the payload of this digest, as last published.
func (s *publishedPayloads) current(uid types.UID, dir string, digest [sha256.Size]byte) bool {
	if s == nil {
		return false
	}
	s.mu.Lock()
	v, ok := s.pods[uid][dir]
	s.mu.Unlock()
	if !ok || v.digest != digest {
		return false
	}
	target, err := os.Readlink(filepath.Join(dir, atomic.DataLink))
	return err == nil && target == v.version
}

// record notes what dir holds after a publish; a version that cannot be read is not
// recorded (the next refresh compares on disk).
func (s *publishedPayloads) record(uid types.UID, dir string, digest [sha256.Size]byte) {
	if s == nil {
		return
	}
	target, err := os.Readlink(filepath.Join(dir, atomic.DataLink))
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		delete(s.pods[uid], dir)
		return
	}
	if s.pods == nil {
		s.pods = map[types.UID]map[string]publishedVersion{}
	}
	if s.pods[uid] == nil {
		s.pods[uid] = map[string]publishedVersion{}
	}
	s.pods[uid][dir] = publishedVersion{digest: digest, version: target}
}

// forget drops everything of a pod whose volumes are gone.
func (s *publishedPayloads) forget(uid types.UID) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.pods, uid)
}

// payloadDigest hashes a payload, its paths in order with each file's mode and data,
// and the group that owns its files (fsGroup; -1 for none).
func payloadDigest(payload map[string]atomic.FileProjection, fsGroup *int64) [sha256.Size]byte {
	h := sha256.New()
	var n [8]byte
	put := func(b []byte) {
		binary.BigEndian.PutUint64(n[:], uint64(len(b)))
		h.Write(n[:])
		h.Write(b)
	}
	group := int64(-1)
	if fsGroup != nil {
		group = *fsGroup
	}
	put(strconv.AppendInt(nil, group, 10))
	for _, p := range slices.Sorted(maps.Keys(payload)) {
		f := payload[p]
		put([]byte(p))
		put(strconv.AppendInt(nil, int64(f.Mode), 8))
		put(f.Data)
	}
	var d [sha256.Size]byte
	h.Sum(d[:0])
	return d
}
