package volume

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
)

func TestHostPathTypeCheck(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	chr := filepath.Join(dir, "chr")
	blk := filepath.Join(dir, "blk")
	if os.Geteuid() == 0 {
		if err := unix.Mknod(chr, unix.S_IFCHR|0o600, int(unix.Mkdev(1, 3))); err != nil {
			t.Fatal(err)
		}
		if err := unix.Mknod(blk, unix.S_IFBLK|0o600, int(unix.Mkdev(7, 0))); err != nil {
			t.Fatal(err)
		}
	}
	missing := filepath.Join(dir, "missing")

	tests := []struct {
		name     string
		path     string
		typ      v1.HostPathType
		wantErr  string
		rootOnly bool
		check    func(t *testing.T)
	}{
		{name: "unset type checks nothing", path: missing, typ: v1.HostPathUnset},
		{name: "directory", path: dir, typ: v1.HostPathDirectory},
		{name: "directory is a file", path: file, typ: v1.HostPathDirectory,
			wantErr: "hostPath type check failed: " + file + " is not a directory"},
		{name: "directory missing", path: missing, typ: v1.HostPathDirectory,
			wantErr: "hostPath type check failed: " + missing + " is not a directory"},
		{name: "DirectoryOrCreate creates", path: filepath.Join(dir, "new/sub"), typ: v1.HostPathDirectoryOrCreate,
			check: func(t *testing.T) {
				fi, err := os.Stat(filepath.Join(dir, "new/sub"))
				if err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o755 {
					t.Errorf("created dir: %v %v", fi, err)
				}
			}},
		{name: "DirectoryOrCreate on a file", path: file, typ: v1.HostPathDirectoryOrCreate,
			wantErr: "is not a directory"},
		{name: "file", path: file, typ: v1.HostPathFile},
		{name: "file is a directory", path: dir, typ: v1.HostPathFile,
			wantErr: "hostPath type check failed: " + dir + " is not a file"},
		{name: "FileOrCreate creates", path: filepath.Join(dir, "newfile"), typ: v1.HostPathFileOrCreate,
			check: func(t *testing.T) {
				fi, err := os.Stat(filepath.Join(dir, "newfile"))
				if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o644 {
					t.Errorf("created file: %v %v", fi, err)
				}
			}},
		{name: "FileOrCreate without parent", path: filepath.Join(dir, "nodir/f"), typ: v1.HostPathFileOrCreate,
			wantErr: "hostPath create"},
		{name: "socket", path: sock, typ: v1.HostPathSocket},
		{name: "socket is a file", path: file, typ: v1.HostPathSocket,
			wantErr: "is not a socket file"},
		{name: "char device", path: chr, typ: v1.HostPathCharDev, rootOnly: true},
		{name: "char device is a block device", path: blk, typ: v1.HostPathCharDev, rootOnly: true,
			wantErr: "is not a character device"},
		{name: "block device", path: blk, typ: v1.HostPathBlockDev, rootOnly: true},
		{name: "block device is a socket", path: sock, typ: v1.HostPathBlockDev,
			wantErr: "is not a block device"},
		{name: "unknown type", path: dir, typ: "Fifo", wantErr: "Fifo is an invalid volume type"},
		{name: "relative path", path: "etc", typ: v1.HostPathUnset, wantErr: "must be an absolute path"},
		{name: "dot-dot in path", path: dir + "/../x", typ: v1.HostPathUnset, wantErr: "must not contain '..'"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.rootOnly && os.Geteuid() != 0 {
				t.Skip("needs root for mknod")
			}
			typ := tc.typ
			mnt, err := hostPathPlugin{}.setUp(context.Background(), &setUpRequest{
				pod: basePod(),
				vol: &v1.Volume{Name: "h", VolumeSource: v1.VolumeSource{HostPath: &v1.HostPathVolumeSource{Path: tc.path, Type: &typ}}},
			})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if mnt.HostPath != tc.path || mnt.ReadOnly || mnt.Managed {
				t.Errorf("mount = %+v", mnt)
			}
			if tc.check != nil {
				tc.check(t)
			}
		})
	}
}
