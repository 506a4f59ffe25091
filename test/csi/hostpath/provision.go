package hostpath

import (
	"crypto/rand"
	"encoding/hex"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// defaultBlockSize is the size of a block volume created without a capacity: the
// backing file is sparse, so this costs nothing until written.
const defaultBlockSize = 1 << 30

// volumeSize decides the capacity of a new volume from the request's range: the required
// bytes, or for a block volume without any, defaultBlockSize within the limit. A mount
// volume created without a capacity has size 0 ("unknown"): a directory has no size.
func volumeSize(r *csi.CapacityRange, block bool, max int64) (int64, error) {
	required, limit := r.GetRequiredBytes(), r.GetLimitBytes()
	if required < 0 || limit < 0 {
		return 0, status.Error(codes.InvalidArgument, "capacity range: negative bytes")
	}
	if limit > 0 && required > limit {
		return 0, status.Errorf(codes.InvalidArgument, "capacity range: required %d bytes exceed the limit of %d", required, limit)
	}
	size := required
	if size == 0 && block {
		size = defaultBlockSize
		if limit > 0 && limit < size {
			size = limit
		}
	}
	if max > 0 && size > max {
		return 0, status.Errorf(codes.OutOfRange, "capacity %d bytes is more than the maximum volume size of %d", size, max)
	}
	return size, nil
}

// sizeFits says whether an existing volume of size bytes satisfies a capacity range, as a
// repeated CreateVolume with the same name must.
func sizeFits(size int64, r *csi.CapacityRange) bool {
	limit := r.GetLimitBytes()
	return size >= r.GetRequiredBytes() && (limit == 0 || size <= limit)
}

// topologyAllows says whether volumes made on the node with the segment key=value satisfy
// the requirement. Only requisite topologies bind; preferred ones are a subset of them.
func topologyAllows(req *csi.TopologyRequirement, key, value string) bool {
	if key == "" || len(req.GetRequisite()) == 0 {
		return true
	}
	for _, t := range req.GetRequisite() {
		if v, ok := t.GetSegments()[key]; ok && v == value {
			return true
		}
	}
	return false
}

// newVolumeID returns a fresh random volume ID, usable as a file name.
func newVolumeID() (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}

// validID says whether an ID coming from a request can name a file under the state dir:
// letters, digits, '-', '_' and '.', not "." or "..", not the state file.
func validID(id string) bool {
	if id == "" || id == "." || id == ".." || len(id) > 128 || id == stateFile || id == stateFile+".tmp" {
		return false
	}
	for _, c := range id {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '_', c == '.':
		default:
			return false
		}
	}
	return true
}
