package memlimit

import (
	"bufio"
	"io/fs"
	"path"
	"strconv"
	"strings"
)

// fromProc computes the limit from a file system laid out like the root of
// a Linux machine (/proc and /sys/fs/cgroup); fsys is os.DirFS("/") in
// production and a fake in tests. ok is false if nothing could be read.
func fromProc(fsys fs.FS) (l Limit, ok bool) {
	if n, ok := memAvailable(fsys); ok {
		l = Limit{Bytes: n, Source: "MemAvailable in /proc/meminfo"}
	}
	for _, c := range cgroupHeadrooms(fsys) {
		if !l.Known() || c.Bytes < l.Bytes {
			l = c
		}
	}
	if l.Known() {
		return l, true
	}
	return Limit{}, false
}

// memAvailable reads MemAvailable from /proc/meminfo.
func memAvailable(fsys fs.FS) (Size, bool) {
	f, err := fsys.Open("proc/meminfo")
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == "MemAvailable:" {
			n, err := strconv.ParseUint(fields[1], 10, 64)
			if err != nil {
				return 0, false
			}
			mult := 1
			if len(fields) >= 3 && strings.EqualFold(fields[2], "kB") {
				mult = 1024
			}
			s := Size(n).Times(mult)
			return s, s > 0
		}
	}
	return 0, false
}

// cgroupHeadrooms returns, for each cgroup of this process that has a
// memory limit (and each limited ancestor), the limit minus the usage.
func cgroupHeadrooms(fsys fs.FS) []Limit {
	groups, err := fs.ReadFile(fsys, "proc/self/cgroup")
	if err != nil {
		return nil
	}
	mounts, _ := fs.ReadFile(fsys, "proc/self/mountinfo")
	var out []Limit
	for _, line := range strings.Split(string(groups), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		var v2 bool
		switch {
		case parts[0] == "0" && parts[1] == "":
			v2 = true
		case hasWord(parts[1], "memory"):
		default:
			continue
		}
		for _, dir := range cgroupDirs(string(mounts), parts[2], v2) {
			if l, ok := headroom(fsys, dir, v2); ok {
				out = append(out, l)
			}
		}
	}
	return out
}

func hasWord(list, w string) bool {
	for _, x := range strings.Split(list, ",") {
		if x == w {
			return true
		}
	}
	return false
}

// cgroupDirs returns the directories (relative to /) of the cgroup at
// cgPath and its ancestors up to the mount point of the hierarchy, taken
// from mountinfo (falling back to the usual /sys/fs/cgroup locations).
func cgroupDirs(mountinfo, cgPath string, v2 bool) []string {
	type mnt struct{ root, point string }
	var ms []mnt
	for _, line := range strings.Split(mountinfo, "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		if !ok {
			continue
		}
		f, g := strings.Fields(pre), strings.Fields(post)
		if len(f) < 5 || len(g) < 1 {
			continue
		}
		switch {
		case v2 && g[0] == "cgroup2":
		case !v2 && g[0] == "cgroup" && len(g) >= 3 && hasWord(g[2], "memory"):
		default:
			continue
		}
		ms = append(ms, mnt{unescape(f[3]), unescape(f[4])})
	}
	if len(ms) == 0 {
		if v2 {
			ms = append(ms, mnt{"/", "/sys/fs/cgroup"}, mnt{"/", "/sys/fs/cgroup/unified"})
		} else {
			ms = append(ms, mnt{"/", "/sys/fs/cgroup/memory"})
		}
	}
	var dirs []string
	for _, m := range ms {
		rel := cgPath
		if m.root != "/" {
			// Inside a cgroup namespace the mount's root is our cgroup or
			// an ancestor of it.
			if r, ok := strings.CutPrefix(cgPath, m.root); ok && (r == "" || r[0] == '/') {
				rel = r
			} else {
				rel = "/"
			}
		}
		for p := path.Clean("/" + rel); ; p = path.Dir(p) {
			dirs = append(dirs, strings.TrimPrefix(path.Join(m.point, p), "/"))
			if p == "/" {
				break
			}
		}
	}
	return dirs
}

// unescape undoes mountinfo's octal escapes (\040 for a space).
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// headroom reads the limit and usage of the cgroup directory dir.
func headroom(fsys fs.FS, dir string, v2 bool) (Limit, bool) {
	limitFile, usageFile, inactive := "memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file"
	if v2 {
		limitFile, usageFile, inactive = "memory.max", "memory.current", "inactive_file"
	}
	limit, ok := readUint(fsys, path.Join(dir, limitFile))
	// cgroup v1 reports "no limit" as a huge page-aligned number.
	if !ok || limit >= 1<<62 {
		return Limit{}, false
	}
	usage, _ := readUint(fsys, path.Join(dir, usageFile))
	if st, err := fs.ReadFile(fsys, path.Join(dir, "memory.stat")); err == nil {
		for _, line := range strings.Split(string(st), "\n") {
			if f := strings.Fields(line); len(f) == 2 && f[0] == inactive {
				if n, err := strconv.ParseUint(f[1], 10, 64); err == nil && n <= usage {
					usage -= n
				}
			}
		}
	}
	free := Size(0)
	if usage < limit {
		free = Size(limit - usage)
	}
	// A cgroup already at its limit: report 1 byte rather than "unknown".
	return Limit{Bytes: max(free, 1), Source: "cgroup limit /" + dir + "/" + limitFile}, true
}

// readUint reads a file holding one unsigned number ("max" is not one).
func readUint(fsys fs.FS, name string) (uint64, bool) {
	b, err := fs.ReadFile(fsys, name)
	if err != nil {
		return 0, false
	}
	n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	return n, err == nil
}
