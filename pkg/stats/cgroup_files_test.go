package stats

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestReadKeyValuesKeepsTheKeysAsked(t *testing.T) {
	path := filepath.Join(t.TempDir(), "memory.stat")
	content := "anon 4096\nfile 8192\nkernel x12\ninactive_file 100\npgfault  7 \nno_value\n\nanon_thp 3"
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := readKeyValues(path, "anon", "inactive_file", "kernel", "pgfault", "absent")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]uint64{"anon": 4096, "inactive_file": 100, "pgfault": 7}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	if _, err := readKeyValues(filepath.Join(t.TempDir(), "none"), "anon"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("absent file: err %v, want not exist", err)
	}
}

func TestReadKeyValuesOfALargeFile(t *testing.T) {
	// Larger than the lent buffer: it grows, and the last line is read.
	path := filepath.Join(t.TempDir(), "vmstat")
	content := strings.Repeat("nr_something 1\n", 1000) + "pgmajfault 42\n"
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	for range 2 { // the second read reuses the grown buffer
		got, err := readKeyValues(path, "pgmajfault")
		if err != nil || got["pgmajfault"] != 42 {
			t.Fatalf("got %v, %v; want pgmajfault 42", got, err)
		}
	}
}

func TestReadUint(t *testing.T) {
	dir := t.TempDir()
	for name, content := range map[string]string{"n": "123\n", "max": "max\n", "bad": "12a\n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if v, err := readUint(filepath.Join(dir, "n")); err != nil || v != 123 {
		t.Errorf("n: %d, %v; want 123", v, err)
	}
	if v, err := readUint(filepath.Join(dir, "max")); err != nil || v != math.MaxUint64 {
		t.Errorf("max: %d, %v; want MaxUint64", v, err)
	}
	if _, err := readUint(filepath.Join(dir, "bad")); err == nil {
		t.Error("bad: no error")
	}
	if _, err := readUint(filepath.Join(dir, "absent")); !errors.Is(err, errNoCgroup) {
		t.Errorf("absent: err %v, want errNoCgroup", err)
	}
}

// BenchmarkReadKeyValues reads a cgroup v2 memory.stat for the four
// figures the housekeeping takes from it, as it does for every pod and
// container each round.
func BenchmarkReadKeyValues(b *testing.B) {
	path := filepath.Join(b.TempDir(), "memory.stat")
	var sb strings.Builder
	for _, k := range []string{"anon", "file", "kernel", "kernel_stack", "pagetables", "sec_pagetables", "percpu", "sock", "vmalloc", "shmem", "zswap", "zswapped", "file_mapped", "file_dirty", "file_writeback", "swapcached", "anon_thp", "file_thp", "shmem_thp", "inactive_anon", "active_anon", "inactive_file", "active_file", "unevictable", "slab_reclaimable", "slab_unreclaimable", "slab", "workingset_refault_anon", "workingset_refault_file", "workingset_activate_anon", "workingset_activate_file", "workingset_restore_anon", "workingset_restore_file", "workingset_nodereclaim", "pgscan", "pgsteal", "pgscan_kswapd", "pgscan_direct", "pgsteal_kswapd", "pgsteal_direct", "pgfault", "pgmajfault", "pgrefill", "pgactivate", "pgdeactivate", "pglazyfree", "pglazyfreed", "thp_fault_alloc", "thp_collapse_alloc"} {
		sb.WriteString(k + " 123456789\n")
	}
	if err := os.WriteFile(path, []byte(sb.String()), 0o644); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := readKeyValues(path, "inactive_file", "anon", "pgfault", "pgmajfault"); err != nil {
			b.Fatal(err)
		}
	}
}
