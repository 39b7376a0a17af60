package localcluster

import (
	"testing"
	"time"
)

func TestParseProcStat(t *testing.T) {
	// pid (comm) state ppid ... utime (14) stime (15); the name may hold
	// spaces and parentheses.
	stat := "4242 (ludus (x) y) S 1 4242 4242 0 -1 4194560 5000 0 0 0 250 75 0 0 20 0 12 0 100 0\n"
	got, ok := parseProcStat(stat)
	if !ok || got != 3250*time.Millisecond {
		t.Errorf("%v, %v; want 3.25s", got, ok)
	}
	if _, ok := parseProcStat("garbage"); ok {
		t.Error("garbage parsed")
	}
	self, ok := procCPUTime("/proc/self/stat")
	if ok && self < 0 {
		t.Errorf("own CPU time %v", self)
	}
}

func TestCPUCores(t *testing.T) {
	a := map[string]time.Duration{"gateway": time.Second, "bench": 2 * time.Second, "gone": time.Second}
	b := map[string]time.Duration{"gateway": 2 * time.Second, "bench": 2500 * time.Millisecond, "new": time.Second}
	s, total := cpuCores(a, b, 2*time.Second)
	if s != "bench:0.25,gateway:0.50" || total != 0.75 {
		t.Errorf("%q %v; want \"bench:0.25,gateway:0.50\" 0.75", s, total)
	}
}
