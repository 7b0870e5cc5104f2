package memlimit

import (
	"math"
	"strings"
	"testing"
	"testing/fstest"
)

func TestParseSize(t *testing.T) {
	for _, c := range []struct {
		in   string
		want Size
	}{
		{"1", 1}, {"1048576", 1 << 20}, {"512M", 512 << 20}, {"4G", 4 << 30}, {"4g", 4 << 30},
		{"4GiB", 4 << 30}, {"4GB", 4 << 30}, {"1.5G", 3 << 29}, {"100k", 100 << 10}, {"2T", 2 << 40},
		{"1P", 1 << 50}, {" 8M ", 8 << 20}, {"10B", 10}, {"15.5P", Size(15.5 * (1 << 50))},
	} {
		got, err := ParseSize(c.in)
		if err != nil || got != c.want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", c.in, got, err, c.want)
		}
	}
	for _, in := range []string{"", "G", "0", "0M", "-1G", "1X", "1.2.3G", "NaN", "Inf", "1e30G", "16384P",
		"18446744073709551616", "0x10M", "1_000", "0.1B", "4 Gigs", "M4"} {
		if got, err := ParseSize(in); err == nil {
			t.Errorf("ParseSize(%q) = %d, want an error", in, got)
		}
	}
}

func TestSaturating(t *testing.T) {
	for _, c := range []struct {
		got, want Size
	}{
		{Mul(2, 3, 4), 24},
		{Mul(), 1},
		{Mul(math.MaxInt, math.MaxInt, math.MaxInt), Inf},
		{Mul(math.MaxInt, math.MaxInt, math.MaxInt, 0), 0},
		{Mul(math.MaxInt, 2), Size(math.MaxInt) * 2},
		{Mul(math.MaxInt, math.MaxInt, 5), Inf},
		{Mul(4, -1), Inf},
		{Mul(-1, 0), 0},
		{Add(Inf, 1), Inf},
		{Add(Inf-1, 1), Inf},
		{Add(1, 2, 3), 6},
		{Size(1 << 40).Times(1 << 30), Inf},
		{Size(7).Times(6), 42},
		{Size(7).Times(-1), Inf},
	} {
		if c.got != c.want {
			t.Errorf("got %d, want %d", c.got, c.want)
		}
	}
	for s, want := range map[Size]string{0: "0 B", 1023: "1023 B", 1536: "1.5 KiB", 4 << 40: "4.0 TiB", Inf: "more than 16 EiB"} {
		if s.String() != want {
			t.Errorf("%d.String() = %q, want %q", uint64(s), s.String(), want)
		}
	}
}

func TestCheck(t *testing.T) {
	l := Limit{Bytes: 1 << 30, Source: "test"}
	if err := l.Check("x", 1<<30); err != nil {
		t.Errorf("exact fit refused: %v", err)
	}
	err := l.Check("q.npy", Inf)
	if err == nil || err.Error() != "q.npy: needs more than 16 EiB of memory, but only 1.0 GiB is available (test)" {
		t.Errorf("err = %v", err)
	}
	if err := (Limit{}).Check("x", Inf); err != nil {
		t.Errorf("unknown limit refused: %v", err)
	}
	var f Flag
	if err := f.Set("2G"); err != nil || f.Limit().Bytes != 2<<30 {
		t.Errorf("flag: %v %v", err, f.Limit())
	}
	if err := NewFlag("-max-memory").Set("lots"); err == nil {
		t.Error("bad flag accepted")
	}
	// An unset flag is the detected limit. MemAvailable moves between two
	// reads, so the sizes are compared within 1/8, the sources exactly.
	d, det := NewFlag("-m").Limit(), Detect()
	if d.Source != det.Source || (d.Bytes == 0) != (det.Bytes == 0) ||
		d.Bytes > det.Bytes+det.Bytes/8 || det.Bytes > d.Bytes+d.Bytes/8 {
		t.Errorf("unset flag %v, Detect %v", d, det)
	}
}

const meminfo = "MemTotal:       24684084 kB\nMemFree:        24204076 kB\nMemAvailable:   20000000 kB\n"

// TestFromProc feeds fake /proc and /sys trees: cgroup v2, v1 (including a
// cgroup namespace), unlimited groups, and a machine with no /proc.
func TestFromProc(t *testing.T) {
	mi2 := "31 23 0:28 / /sys/fs/cgroup rw,relatime - cgroup2 cgroup2 rw\n"
	mi1 := "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
	mi1ns := "35 31 0:32 /docker/abc /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
	for _, c := range []struct {
		name   string
		files  map[string]string
		want   Size
		source string
	}{
		{"meminfo only", map[string]string{"proc/meminfo": meminfo}, 20000000 << 10, "MemAvailable"},
		{"v2 limit below", map[string]string{
			"proc/meminfo": meminfo, "proc/self/cgroup": "0::/user/job\n", "proc/self/mountinfo": mi2,
			"sys/fs/cgroup/user/job/memory.max":     "1073741824\n",
			"sys/fs/cgroup/user/job/memory.current": "536870912\n",
			"sys/fs/cgroup/user/job/memory.stat":    "anon 1\ninactive_file 268435456\n",
			"sys/fs/cgroup/user/memory.max":         "max\n",
		}, 768 << 20, "/sys/fs/cgroup/user/job/memory.max"},
		{"v2 parent tighter", map[string]string{
			"proc/meminfo": meminfo, "proc/self/cgroup": "0::/user/job\n", "proc/self/mountinfo": mi2,
			"sys/fs/cgroup/user/job/memory.max":     "max\n",
			"sys/fs/cgroup/user/memory.max":         "104857600\n",
			"sys/fs/cgroup/user/memory.current":     "4857600\n",
			"sys/fs/cgroup/user/job/memory.current": "1\n",
		}, 100000000, "/sys/fs/cgroup/user/memory.max"},
		{"v2 unlimited", map[string]string{
			"proc/meminfo": meminfo, "proc/self/cgroup": "0::/\n", "proc/self/mountinfo": mi2,
			"sys/fs/cgroup/memory.max": "max\n",
		}, 20000000 << 10, "MemAvailable"},
		{"v1 hybrid", map[string]string{
			"proc/meminfo": meminfo, "proc/self/cgroup": "4:memory:/job\n0::/\n", "proc/self/mountinfo": mi1 + mi2,
			"sys/fs/cgroup/memory/job/memory.limit_in_bytes": "2147483648\n",
			"sys/fs/cgroup/memory/job/memory.usage_in_bytes": "1073741824\n",
			"sys/fs/cgroup/memory/job/memory.stat":           "cache 5\ntotal_inactive_file 1073741824\n",
			"sys/fs/cgroup/memory/memory.limit_in_bytes":     "9223372036854771712\n",
		}, 2 << 30, "memory.limit_in_bytes"},
		{"v1 namespace", map[string]string{
			"proc/meminfo": meminfo, "proc/self/cgroup": "4:memory:/docker/abc\n", "proc/self/mountinfo": mi1ns,
			"sys/fs/cgroup/memory/memory.limit_in_bytes": "3221225472\n",
			"sys/fs/cgroup/memory/memory.usage_in_bytes": "1073741824\n",
		}, 2 << 30, "/sys/fs/cgroup/memory/memory.limit_in_bytes"},
		{"cgroup full", map[string]string{
			"proc/meminfo": meminfo, "proc/self/cgroup": "0::/\n",
			"sys/fs/cgroup/memory.max": "1000\n", "sys/fs/cgroup/memory.current": "2000\n",
		}, 1, "memory.max"},
		{"no mountinfo, v2 fallback", map[string]string{
			"proc/self/cgroup":         "0::/\n",
			"sys/fs/cgroup/memory.max": "4096\n", "sys/fs/cgroup/memory.current": "1024\n",
		}, 3072, "memory.max"},
	} {
		t.Run(c.name, func(t *testing.T) {
			fsys := fstest.MapFS{}
			for k, v := range c.files {
				fsys[k] = &fstest.MapFile{Data: []byte(v)}
			}
			l, ok := fromProc(fsys)
			if !ok || l.Bytes != c.want || !strings.Contains(l.Source, c.source) {
				t.Errorf("fromProc = %v %q, %v; want %d from %q", uint64(l.Bytes), l.Source, ok, c.want, c.source)
			}
		})
	}
	// Mount points with escaped spaces.
	fsys := fstest.MapFS{
		"proc/self/cgroup":     {Data: []byte("0::/a b\n")},
		"proc/self/mountinfo":  {Data: []byte("1 2 0:1 / /my\\040cg rw - cgroup2 cgroup2 rw\n")},
		"my cg/a b/memory.max": {Data: []byte("100\n")},
	}
	if l, ok := fromProc(fsys); !ok || l.Bytes != 100 {
		t.Errorf("escaped mount point: %v %q, %v", uint64(l.Bytes), l.Source, ok)
	}
	if l, ok := fromProc(fstest.MapFS{}); ok || l.Known() {
		t.Errorf("empty tree: %v, %v", l, ok)
	}
	if l, ok := fromProc(fstest.MapFS{"proc/meminfo": {Data: []byte("MemAvailable: lots kB\n")}}); ok {
		t.Errorf("bad meminfo: %v", l)
	}
}
