package bench

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"
)

// machine describes where the run happened.
type machine struct {
	Cores   int
	CPU     string
	MemGiB  float64
	Kernel  string
	Go      string
	Disk    string        // device, file system, rotational or not
	Fsync   time.Duration // median of a 4 KiB write + fdatasync in the work dir
	LoadAvg string        // /proc/loadavg at the start
}

func describeMachine(dir string) machine {
	m := machine{Cores: runtime.NumCPU(), Go: runtime.Version()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for l := range strings.Lines(string(b)) {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		if kb, err := parseStatusKB(b, "MemTotal"); err == nil {
			m.MemGiB = float64(kb) / (1 << 30)
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		f := strings.Fields(string(b))
		if len(f) >= 3 {
			m.LoadAvg = strings.Join(f[:3], " ")
		}
	}
	m.Disk = diskOf(dir)
	m.Fsync = fsyncProbe(dir)
	return m
}

// diskOf names the block device and file system that hold dir.
func diskOf(dir string) string {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "unknown"
	}
	f, err := os.Open("/proc/mounts")
	if err != nil {
		return "unknown"
	}
	defer f.Close()
	var dev, fs, at string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		p := strings.Fields(sc.Text())
		if len(p) < 3 {
			continue
		}
		if (abs == p[1] || strings.HasPrefix(abs, strings.TrimSuffix(p[1], "/")+"/")) && len(p[1]) >= len(at) {
			dev, at, fs = p[0], p[1], p[2]
		}
	}
	if dev == "" {
		return "unknown"
	}
	kind := ""
	base := filepath.Base(dev)
	for _, b := range []string{base, strings.TrimRight(base, "0123456789")} {
		if r, err := os.ReadFile("/sys/block/" + b + "/queue/rotational"); err == nil {
			kind = map[bool]string{true: "rotational", false: "non-rotational"}[strings.TrimSpace(string(r)) == "1"]
			break
		}
	}
	return strings.TrimSpace(fmt.Sprintf("%s %s %s", dev, fs, kind))
}

// fsyncProbe times a 4 KiB write followed by fdatasync, 100 times.
func fsyncProbe(dir string) time.Duration {
	f, err := os.CreateTemp(dir, "fsync-probe-*")
	if err != nil {
		return 0
	}
	defer os.Remove(f.Name())
	defer f.Close()
	buf := make([]byte, 4096)
	var ds []time.Duration
	for range 100 {
		t := time.Now()
		if _, err := f.WriteAt(buf, 0); err != nil {
			return 0
		}
		if err := f.Sync(); err != nil {
			return 0
		}
		ds = append(ds, time.Since(t))
	}
	slices.Sort(ds)
	return ds[len(ds)/2]
}

func (m machine) String() string {
	return fmt.Sprintf("%d cores (%s), %.0f GiB RAM, disk %s (4 KiB write+fsync median %s), Linux %s, %s, load average at start %s",
		m.Cores, m.CPU, m.MemGiB, m.Disk, ms(m.Fsync), m.Kernel, m.Go, m.LoadAvg)
}
