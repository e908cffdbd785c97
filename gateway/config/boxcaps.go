package config

import (
	"bufio"
	"os"
	"runtime"
	"strconv"
	"strings"
)

// HostBoxCaps is the most one box may ask for: box.max_memory_mib and
// box.max_cpus when set, else derived from this host: the smaller of
// vm.max_memory_mib (when set) and half the host's RAM, and the host's CPU
// count. On Kubernetes the nodes, not this host, run the boxes: set both.
func (c Config) HostBoxCaps() (memMiB, cpus int) {
	memMiB, cpus = c.Box.MaxMemoryMiB, c.Box.MaxCPUs
	if memMiB == 0 {
		memMiB = hostMemMiB() / 2
		if c.VM.MaxMemoryMiB > 0 && (memMiB <= 0 || c.VM.MaxMemoryMiB < memMiB) {
			memMiB = c.VM.MaxMemoryMiB
		}
		// Never below the default size: every box gets that.
		memMiB = max(memMiB, c.VM.MemoryMiB)
	}
	if cpus == 0 {
		cpus = max(runtime.NumCPU(), c.VM.VCPUs)
	}
	return memMiB, cpus
}

// hostMemMiB is the host's RAM (MemTotal of /proc/meminfo), 0 when unknown.
func hostMemMiB() int {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "MemTotal:"); ok {
			kb, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(rest), " kB"))
			if err != nil {
				return 0
			}
			return kb / 1024
		}
	}
	return 0
}
