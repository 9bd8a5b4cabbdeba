package harness

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// clockTicks is USER_HZ, the unit of the CPU times in /proc/<pid>/stat: 100
// on every Linux architecture Go supports.
const clockTicks = 100

// ProcCPU is the user plus system CPU time that process pid has used so far
// (utime+stime of /proc/<pid>/stat, in 10 ms ticks): its own threads only,
// not its children's. Linux only.
func ProcCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("cpu of process %d: %w", pid, err)
	}
	// The command name, in parentheses, may hold spaces: count fields
	// after its closing parenthesis, which are fields 3 onwards.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("cpu of process %d: no ')' in /proc/%d/stat", pid, pid)
	}
	f := strings.Fields(string(b[i+1:]))
	const utime, stime = 14 - 3, 15 - 3
	if len(f) <= stime {
		return 0, fmt.Errorf("cpu of process %d: %d fields in /proc/%d/stat", pid, len(f)+2, pid)
	}
	var ticks int64
	for _, s := range f[utime : stime+1] {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("cpu of process %d: %w", pid, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / clockTicks, nil
}

// ProcMemory is the resident set size of process pid now (VmRSS) and its
// peak so far (VmHWM, the high-water mark), in bytes, from
// /proc/<pid>/status. Linux only.
func ProcMemory(pid int) (rss, peak int64, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, fmt.Errorf("memory of process %d: %w", pid, err)
	}
	found := 0
	for _, line := range strings.Split(string(b), "\n") {
		name, rest, ok := strings.Cut(line, ":")
		if !ok || (name != "VmRSS" && name != "VmHWM") {
			continue
		}
		f := strings.Fields(rest) // "1234 kB"
		if len(f) != 2 || f[1] != "kB" {
			return 0, 0, fmt.Errorf("memory of process %d: %s is %q", pid, name, rest)
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("memory of process %d: %s: %w", pid, name, err)
		}
		if name == "VmRSS" {
			rss = kb << 10
		} else {
			peak = kb << 10
		}
		found++
	}
	if found != 2 {
		return 0, 0, fmt.Errorf("memory of process %d: VmRSS or VmHWM missing from /proc/%d/status", pid, pid)
	}
	return rss, peak, nil
}
