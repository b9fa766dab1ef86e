package powercut_test

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"ticketrelay/testkit/powercut"
)

// model is the durability rules written as plainly as possible: files are
// inodes with a live and a durable content, directories map names to
// inodes, live and as of their last sync. A cut makes the durable the live.
type model struct {
	next    int
	live    map[int][]byte
	durable map[int][]byte
	dirs    map[string]map[string]int // directory → name → inode
	synced  map[string]map[string]int // as of the directory's last fsync
}

var modelDirs = []string{".", "sub"}

func newModel() *model {
	m := &model{live: map[int][]byte{}, durable: map[int][]byte{}, dirs: map[string]map[string]int{}, synced: map[string]map[string]int{}}
	for _, d := range modelDirs {
		m.dirs[d] = map[string]int{}
		m.synced[d] = map[string]int{}
	}
	return m
}

func (m *model) cut() {
	for d := range m.dirs {
		m.dirs[d] = maps.Clone(m.synced[d])
	}
	for ino, b := range m.durable {
		m.live[ino] = slices.Clone(b)
	}
}

// TestRandomOpsMatchModel runs random sequences of writes, truncates,
// creates, renames, unlinks, syncs and cuts on the mount and on the model,
// and compares every file after every step.
func TestRandomOpsMatchModel(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3, 4} {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			runModel(t, seed, 300)
		})
	}
}

func runModel(t *testing.T, seed uint64, steps int) {
	pc := powercut.MountT(t, powercut.Options{})
	root := pc.Mountpoint()
	if err := os.Mkdir(filepath.Join(root, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	fsync(t, root)
	r := rand.New(rand.NewPCG(seed, seed))
	m := newModel()
	names := []string{"a", "b", "c", "d"}
	pick := func() (string, string, string) {
		d, n := modelDirs[r.IntN(len(modelDirs))], names[r.IntN(len(names))]
		return d, n, filepath.Join(root, d, n)
	}
	var log []string
	cuts := 0
	for step := range steps {
		d, n, p := pick()
		ino, exists := m.dirs[d][n]
		var what string
		switch k := r.IntN(100); {
		case k < 10:
			what = "create " + p
			if exists {
				break
			}
			f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
			if err != nil {
				t.Fatalf("%s: %v\n%v", what, err, log)
			}
			f.Close()
			m.next++
			m.dirs[d][n] = m.next
			m.live[m.next], m.durable[m.next] = nil, nil
		case k < 40:
			off, size := r.IntN(10000), 1+r.IntN(5000)
			what = fmt.Sprintf("write %s %d+%d", p, off, size)
			if !exists {
				break
			}
			data := make([]byte, size)
			for i := range data {
				data[i] = byte('A' + r.IntN(26))
			}
			writeFile(t, p, int64(off), string(data))
			b := m.live[ino]
			if len(b) < off+size {
				b = append(b, make([]byte, off+size-len(b))...)
			}
			copy(b[off:], data)
			m.live[ino] = b
		case k < 48:
			size := r.IntN(12000)
			what = fmt.Sprintf("truncate %s %d", p, size)
			if !exists {
				break
			}
			if err := os.Truncate(p, int64(size)); err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			b := m.live[ino]
			if len(b) < size {
				b = append(b, make([]byte, size-len(b))...)
			}
			m.live[ino] = b[:size]
		case k < 62:
			what = "fsync " + p
			if !exists {
				break
			}
			fsync(t, p)
			m.durable[ino] = slices.Clone(m.live[ino])
		case k < 72:
			what = "fsync dir " + d
			fsync(t, filepath.Join(root, d))
			m.synced[d] = maps.Clone(m.dirs[d])
		case k < 80:
			what = "unlink " + p
			if !exists {
				break
			}
			if err := os.Remove(p); err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			delete(m.dirs[d], n)
		case k < 94:
			d2, n2, p2 := pick()
			what = "rename " + p + " " + p2
			if !exists {
				break
			}
			if err := os.Rename(p, p2); err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			if m.dirs[d2][n2] != ino { // two names of one file: rename does nothing
				delete(m.dirs[d], n)
				m.dirs[d2][n2] = ino
			}
		default:
			what = "cut"
			if err := pc.Cut(); err != nil {
				t.Fatalf("step %d: %v", step, err)
			}
			m.cut()
			cuts++
		}
		log = append(log, what)
		if len(log) > 12 {
			log = log[1:]
		}
		compare(t, root, m, step, log)
	}
	t.Logf("seed %d: %d steps, %d cuts, stats %+v", seed, steps, cuts, pc.Stats())
}

func compare(t *testing.T, root string, m *model, step int, log []string) {
	t.Helper()
	for _, d := range modelDirs {
		entries, err := os.ReadDir(filepath.Join(root, d))
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, e := range entries {
			if d == "." && e.Name() == "sub" {
				continue
			}
			got = append(got, e.Name())
		}
		want := slices.Sorted(maps.Keys(m.dirs[d]))
		if !slices.Equal(got, want) {
			t.Fatalf("step %d: %s lists %v, model %v; last steps:\n%v", step, d, got, want, log)
		}
		for _, name := range want {
			b, err := os.ReadFile(filepath.Join(root, d, name))
			if err != nil && !errors.Is(err, os.ErrNotExist) {
				t.Fatal(err)
			}
			if w := m.live[m.dirs[d][name]]; !bytes.Equal(b, w) {
				t.Fatalf("step %d: %s/%s holds %d bytes, model %d (first difference at %d); last steps:\n%v",
					step, d, name, len(b), len(w), firstDiff(b, w), log)
			}
		}
	}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}
