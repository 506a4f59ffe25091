package userns

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"
)

// User is the user whose subordinate IDs are the node's range, the
// kubelet's.
const User = "kubelet"

// Range is a range of host IDs.
type Range struct {
	First, Length uint32
}

// DefaultRange is the kubelet's range when the node has no "kubelet"
// user: every ID from idsPerPod up, the IDs below left to the host's own
// users and files. (Kubelets before v1.35 started at 65536 whatever
// idsPerPod was.)
func DefaultRange(idsPerPod uint32) Range {
	return Range{First: idsPerPod, Length: uint32(1<<32 - uint64(idsPerPod))}
}

// Files are the files the node's range is read from.
type Files struct {
	Passwd, Subuid, Subgid string
}

// HostFiles are the host's.
var HostFiles = Files{Passwd: "/etc/passwd", Subuid: "/etc/subuid", Subgid: "/etc/subgid"}

// NodeRange finds the node's range as the kubelet does: the subordinate
// IDs of the user "kubelet" when the node has that user, one range, the
// same for users and groups; DefaultRange(idsPerPod) when it has not.
//
// The kubelet asks the getsubids tool, which also knows ranges served by
// an NSS subid module (FreeIPA, say); the agent reads /etc/subuid and
// /etc/subgid itself, which is what getsubids reads on a host without
// one, and looks the user up in /etc/passwd alone. Where the user exists
// but neither file names it, the kubelet without getsubids takes its
// default range, and with it fails to start; the agent takes the default.
func NodeRange(f Files, idsPerPod uint32) (Range, error) {
	def := DefaultRange(idsPerPod)
	uid, found, err := lookupUser(f.Passwd, User)
	if err != nil || !found {
		return def, err
	}
	uids, err := subIDs(f.Subuid, User, uid)
	if err != nil {
		return Range{}, err
	}
	gids, err := subIDs(f.Subgid, User, uid)
	if err != nil {
		return Range{}, err
	}
	switch {
	case len(uids) == 0 && len(gids) == 0:
		return def, nil
	case len(uids) != len(gids) || uids[0] != gids[0]:
		return Range{}, fmt.Errorf("mismatched subuids and subgids for user %q", User)
	case len(uids) > 1:
		return Range{}, fmt.Errorf("user %q has %d subordinate ID ranges in %s, want one", User, len(uids), f.Subuid)
	}
	return uids[0], nil
}

// lookupUser finds name in a passwd file and returns its uid.
func lookupUser(passwd, name string) (uid string, found bool, err error) {
	f, err := os.Open(passwd)
	if errors.Is(err, fs.ErrNotExist) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("look up user %q: %w", name, err)
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Split(s.Text(), ":")
		if len(fields) >= 3 && fields[0] == name {
			return fields[2], true, nil
		}
	}
	if err := s.Err(); err != nil {
		return "", false, fmt.Errorf("look up user %q: %w", name, err)
	}
	return "", false, nil
}

// subIDs reads the ranges of a subuid or subgid file ("owner:first:count"
// lines) that belong to the user, named or by uid, as getsubids lists
// them. A malformed line of the user's is an error; other users' lines
// are not the agent's business.
func subIDs(path, name, uid string) ([]Range, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read subordinate IDs: %w", err)
	}
	defer f.Close()
	var out []Range
	s := bufio.NewScanner(f)
	for s.Scan() {
		line := strings.TrimSpace(s.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		owner, rest, _ := strings.Cut(line, ":")
		if owner != name && owner != uid {
			continue
		}
		first, count, ok := strings.Cut(rest, ":")
		lo, err1 := strconv.ParseUint(first, 10, 32)
		n, err2 := strconv.ParseUint(count, 10, 32)
		if !ok || err1 != nil || err2 != nil || n == 0 {
			return nil, fmt.Errorf("%s: malformed entry %q of user %q", path, line, name)
		}
		out = append(out, Range{First: uint32(lo), Length: uint32(n)})
	}
	if err := s.Err(); err != nil {
		return nil, fmt.Errorf("read subordinate IDs: %w", err)
	}
	return out, nil
}
