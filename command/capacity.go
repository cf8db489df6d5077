package command

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"

	"github.com/urfave/cli/v2"
)

// What one rank costs the host it runs on, for refusing a -np the host cannot hold before
// anything starts (a job that outgrows the host's memory dies half-started, or takes the host
// down with it).
const (
	// processRankBytes is the resident floor of a rank process: its Go runtime, its libp2p host
	// and the connection buffers to every peer.
	processRankBytes = 32 << 20
	// launchRankBytes is the floor of a process of any program hetsync launch starts.
	launchRankBytes = 4 << 20
	// memRankBytes is the floor of a --transport mem rank: its goroutines, communicator and
	// mailboxes inside the one process.
	memRankBytes = 2 << 20
)

// checkHostHolds refuses np ranks of perRank bytes each on a host with avail bytes of memory
// left (0: unknown, nothing is refused). where says what holds the ranks, for the message.
func checkHostHolds(np int, perRank, avail uint64, where string) error {
	if avail == 0 || np <= 0 || perRank == 0 {
		return nil
	}
	most := avail / perRank
	if uint64(np) <= most {
		return nil
	}
	return fmt.Errorf("--np %d: %s cannot hold that many ranks: each needs about %s and %s of memory is available, enough for %d",
		np, where, humanBytes(perRank), humanBytes(avail), most)
}

// checkLocalRanks refuses np ranks, each holding workingSet bytes besides its floor, that this
// host's memory cannot hold: goroutines of this process with --transport mem, processes
// otherwise (none on this host when -H or --hostfile places them).
//
// The process's own limits count too (ulimit -v and -d, RLIMIT_AS and RLIMIT_DATA): every
// --transport mem rank lives in this process's address space, so its headroom under them
// bounds np; a rank process inherits them, so each must hold one rank.
func checkLocalRanks(c *cli.Context, np int, transport string, workingSet uint64) error {
	limit := processLimits()
	switch {
	case transport == "mem":
		avail, where := availableMemory(), "this process (--transport mem)"
		if limit.headroom > 0 && (avail == 0 || limit.headroom < avail) {
			avail, where = limit.headroom, where+" under its "+limit.name
		}
		return checkHostHolds(np, memRankBytes+workingSet, avail, where)
	case hostsGiven(c):
		return nil
	}
	if perRank := processRankBytes + workingSet; np > 0 && limit.size > 0 && limit.size < perRank {
		return fmt.Errorf("--np %d: each rank process would run under this process's %s of %s, and a rank needs about %s",
			np, limit.name, humanBytes(limit.size), humanBytes(perRank))
	}
	return checkHostHolds(np, processRankBytes+workingSet, availableMemory(), "this host")
}

// memoryLimit is the tighter of this process's RLIMIT_AS and RLIMIT_DATA.
type memoryLimit struct {
	name string // the limit, as a user sets it ("ulimit -v" …)
	// size is the limit; headroom is what this process has left under it (0: no limit).
	size, headroom uint64
}

// processLimits reads RLIMIT_AS and RLIMIT_DATA and what this process already uses of each
// (VmSize, VmData of /proc/self/status), and returns the one that leaves less.
func processLimits() memoryLimit {
	var best memoryLimit
	for _, l := range []struct {
		resource int
		name     string
		usage    string
	}{
		{syscall.RLIMIT_AS, "address-space limit (ulimit -v)", "VmSize:"},
		{syscall.RLIMIT_DATA, "data-size limit (ulimit -d)", "VmData:"},
	} {
		var rl syscall.Rlimit
		if err := syscall.Getrlimit(l.resource, &rl); err != nil || rl.Cur == rlimInfinity {
			continue
		}
		used := procStatusBytes("/proc/self/status", l.usage)
		headroom := uint64(1) // a limit already reached: nothing is left, but it is a limit
		if rl.Cur > used {
			headroom = rl.Cur - used
		}
		if best.size == 0 || headroom < best.headroom {
			best = memoryLimit{name: l.name, size: rl.Cur, headroom: headroom}
		}
	}
	return best
}

// rlimInfinity is RLIM_INFINITY as syscall.Rlimit holds it.
const rlimInfinity = ^uint64(0)

// memAvailable reads MemAvailable (kB) from a meminfo file; 0 if absent.
func memAvailable(path string) uint64 { return procStatusBytes(path, "MemAvailable:") }

// availableMemory is the memory this host can still give to a job: MemAvailable, or what the
// process's cgroup still allows when that is less; 0 when neither can be read.
func availableMemory() uint64 {
	avail := memAvailable("/proc/meminfo")
	if limit := cgroupHeadroom("/sys/fs/cgroup"); limit > 0 && (avail == 0 || limit < avail) {
		avail = limit
	}
	return avail
}

// procStatusBytes reads the field key ("MemAvailable:", a value in kB) of a /proc file in
// the format of meminfo or a process's status; 0 if absent.
func procStatusBytes(path, key string) uint64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 2 && f[0] == key {
			kb, err := strconv.ParseUint(f[1], 10, 64)
			if err != nil {
				return 0
			}
			return kb << 10
		}
	}
	return 0
}

// cgroupHeadroom is memory.max less memory.current of a cgroup v2 directory; 0 when there
// is no limit ("max") or the files cannot be read.
func cgroupHeadroom(dir string) uint64 {
	read := func(name string) (uint64, bool) {
		b, err := os.ReadFile(dir + "/" + name)
		if err != nil {
			return 0, false
		}
		v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
		return v, err == nil
	}
	limit, ok := read("memory.max")
	if !ok {
		return 0
	}
	used, ok := read("memory.current")
	if !ok || used >= limit {
		return 0
	}
	return limit - used
}

func humanBytes(n uint64) string {
	const unit = 1 << 10
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := uint64(unit), 0
	for v := n / unit; v >= unit; v /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
