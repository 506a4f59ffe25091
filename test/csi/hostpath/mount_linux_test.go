package hostpath

import (
	"reflect"
	"strings"
	"testing"
)

func TestMountPoints(t *testing.T) {
	info := `22 27 0:21 / /proc rw,relatime - proc proc rw
24 27 0:6 / /dev rw,relatime - devtmpfs devtmpfs rw,size=1k,mode=755
301 27 254:0 /var/csi/abc /var/lib/kubelet/pods/u/volumes/kubernetes.io~csi/my\040vol/mount rw shared:1 - ext4 /dev/vda rw
302 27 0:6 /loop0 /tmp/t/target\134x rw - devtmpfs devtmpfs rw
`
	got, err := mountPoints(strings.NewReader(info))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"/proc", "/dev", "/var/lib/kubelet/pods/u/volumes/kubernetes.io~csi/my vol/mount", `/tmp/t/target\x`}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("mountPoints = %q, want %q", got, want)
	}
	if _, err := mountPoints(strings.NewReader("garbage\n")); err == nil {
		t.Error("a malformed line parsed")
	}
}
