package userns

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestNodeRange(t *testing.T) {
	const (
		passwd  = "root:x:0:0:root:/root:/bin/sh\nkubelet:x:999:999::/var/lib/kubelet:/usr/sbin/nologin\n"
		noUser  = "root:x:0:0:root:/root:/bin/sh\n"
		absent  = "\x00absent" // the file is not there
		kubelet = "kubelet:65536:7208960\n"
	)
	for _, tc := range []struct {
		name                   string
		passwd, subuid, subgid string
		idsPerPod              uint32
		want                   Range
		wantErr                string
	}{
		{name: "no kubelet user", passwd: noUser, subuid: kubelet, subgid: kubelet, want: Range{65536, 1<<32 - 65536}},
		{name: "no kubelet user, larger idsPerPod", passwd: noUser, idsPerPod: 131072, want: Range{131072, 1<<32 - 131072}},
		{name: "no passwd file", passwd: absent, subuid: kubelet, subgid: kubelet, want: Range{65536, 1<<32 - 65536}},
		{name: "user without entries", passwd: passwd, subuid: "other:100000:65536\n", want: Range{65536, 1<<32 - 65536}},
		{name: "user, no subid files", passwd: passwd, subuid: absent, subgid: absent, want: Range{65536, 1<<32 - 65536}},
		{name: "by name", passwd: passwd, subuid: "# ranges\n\nother:100000:65536\n" + kubelet, subgid: kubelet, want: Range{65536, 7208960}},
		{name: "by uid", passwd: passwd, subuid: "999:131072:7208960\n", subgid: "kubelet:131072:7208960\n", want: Range{131072, 7208960}},
		{name: "other users' malformed lines", passwd: passwd, subuid: "other:x\n" + kubelet, subgid: kubelet, want: Range{65536, 7208960}},
		{name: "mismatched", passwd: passwd, subuid: kubelet, subgid: "kubelet:131072:7208960\n", wantErr: `mismatched subuids and subgids for user "kubelet"`},
		{name: "groups only", passwd: passwd, subgid: kubelet, wantErr: `mismatched subuids and subgids for user "kubelet"`},
		{name: "two ranges", passwd: passwd, subuid: kubelet + "kubelet:9000000:65536\n", subgid: kubelet + "kubelet:9000000:65536\n",
			wantErr: `user "kubelet" has 2 subordinate ID ranges`},
		{name: "malformed entry", passwd: passwd, subuid: "kubelet:x:65536\n", subgid: kubelet, wantErr: `malformed entry "kubelet:x:65536"`},
		{name: "empty range", passwd: passwd, subuid: "kubelet:65536:0\n", subgid: kubelet, wantErr: "malformed entry"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			file := func(name, content string) string {
				p := filepath.Join(dir, name)
				if content == absent {
					return p
				}
				if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
					t.Fatal(err)
				}
				return p
			}
			ids := tc.idsPerPod
			if ids == 0 {
				ids = DefaultIDsPerPod
			}
			got, err := NodeRange(Files{Passwd: file("passwd", tc.passwd), Subuid: file("subuid", tc.subuid), Subgid: file("subgid", tc.subgid)}, ids)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("got %+v %v, want %+v", got, err, tc.want)
			}
		})
	}
}
