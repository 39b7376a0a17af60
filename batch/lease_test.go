package batch

import (
	"encoding/json"
	"io"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"ludus.dev/ludus/clusterstate"
)

// etcdCut is a loopback TCP proxy in front of the test etcd whose link can
// be cut: cutting closes every connection through it and refuses new ones
// until mended, as an etcd out of reach would.
type etcdCut struct {
	l      net.Listener
	target string
	mu     sync.Mutex
	cut    bool
	conns  map[net.Conn]bool
}

func newEtcdCut(t *testing.T) *etcdCut {
	t.Helper()
	u, err := url.Parse(etcdSrv.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &etcdCut{l: l, target: u.Host, conns: map[net.Conn]bool{}}
	t.Cleanup(func() { l.Close(); p.setCut(true) })
	go p.serve()
	return p
}

// Endpoint is the proxy's client URL.
func (p *etcdCut) Endpoint() string { return "http://" + p.l.Addr().String() }

func (p *etcdCut) serve() {
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.cut {
			p.mu.Unlock()
			c.Close()
			continue
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			p.mu.Unlock()
			c.Close()
			continue
		}
		p.conns[c], p.conns[up] = true, true
		p.mu.Unlock()
		go func() { io.Copy(up, c); up.Close(); c.Close() }()
		go func() { io.Copy(c, up); up.Close(); c.Close() }()
	}
}

// setCut cuts (true) or mends (false) the link.
func (p *etcdCut) setCut(cut bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = cut
	if cut {
		for c := range p.conns {
			c.Close()
		}
		clear(p.conns)
	}
}

// A worker that loses its etcd lease (etcd out of its reach for longer than
// the lease's TTL) abandons the game it was playing, charging the CPU it
// took, takes a new lease once etcd answers again and goes on: it plays the
// game again and the run completes. The reaper it carries goes on too: it ends a run left
// admitting, which nothing else would.
func TestWorkerOutlivesItsLease(t *testing.T) {
	ctx := testCtx(t, 120*time.Second)
	tenant, _ := newTenant(t)
	link := newEtcdCut(t)
	cli, err := clusterstate.Dial(clusterstate.DialConfig{Endpoints: []string{link.Endpoint()}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	// The runner asks LiveLate after every chunk of 35 ticks and pauses
	// while it answers true: held, the game stays in flight (a short game
	// would be over before the lease is lost); the chunks it let through
	// tell how much of the game was played twice.
	// Until then, that the runner asked tells the game is being played: a
	// lease key alone does not (the claim's answer may still be on its way).
	var chunks atomic.Int64
	var held, playing atomic.Bool
	held.Store(true)
	live := func() bool {
		if held.Load() {
			playing.Store(true)
			return true
		}
		chunks.Add(1)
		return false
	}
	w, _ := startWorker(t, WorkerConfig{ID: "outlives", Etcd: cli, Concurrency: 1, LiveLate: live,
		Reaper: ReaperConfig{Every: 100 * time.Millisecond, AdmitTimeout: time.Second}})
	adm := &Admitter{Etcd: state, Backend: srv, Engine: eng}
	run, err := adm.Admit(ctx, tenant, Spec{Module: "arena", Games: 1, Maps: []Map{{Config: json.RawMessage(longArena)}}, Budget: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	for !playing.Load() {
		if ctx.Err() != nil {
			t.Fatal("the worker never played the game")
		}
		time.Sleep(5 * time.Millisecond)
	}
	first := w.currentLease()
	link.setCut(true)
	select {
	case <-first.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the worker's 2 s lease was not lost in 10 s of etcd out of reach")
	}
	// Out of reach a little longer, and etcd has let the lease expire too.
	time.Sleep(2 * time.Second)
	link.setCut(false)
	held.Store(false)

	// Bounded well below the test's time: without a new lease the worker
	// never plays again.
	r := waitEnded(t, testCtx(t, 40*time.Second), tenant, run.ID)
	if r.Reason != clusterstate.BatchComplete || r.Final.Done != 1 {
		t.Fatalf("run ended %s with %+v", r.Reason, r.Final)
	}
	select {
	case <-w.Done():
		t.Fatal("the worker stopped")
	default:
	}
	if w.currentLease() == first {
		t.Fatal("the worker did not take a new lease")
	}
	rs, err := allResults(ctx, srv, tenant, run.ID, false)
	if err != nil || len(rs) != 1 || rs[0].Worker != "outlives" || rs[0].Error != "" {
		t.Fatalf("results %+v %v", rs, err)
	}
	if full := (rs[0].Ticks + 34) / 35; chunks.Load() != full {
		t.Errorf("%d chunks played for a game of %d chunks: the game was played on under the lost lease", chunks.Load(), full)
	}
	// The abandoned play's CPU is charged to the run once etcd answers.
	if r.Final.CPU <= rs[0].CPUNanos {
		t.Errorf("the run's CPU %d is the played game's %d alone: the abandoned play was not charged", r.Final.CPU, rs[0].CPUNanos)
	}

	// The reaper campaigns again under the new lease and sweeps.
	orphan := clusterstate.BatchRun{Tenant: tenant, ID: newRunID(), Games: 1, Deadline: time.Now().Add(time.Hour),
		BudgetCPU: int64(time.Second), CreatedAt: time.Now()}
	if err := state.AdmitBatchRun(ctx, orphan, int64(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if r := waitEnded(t, testCtx(t, 20*time.Second), tenant, orphan.ID); r.Reason != clusterstate.BatchOrphaned {
		t.Fatalf("run left admitting ended %s", r.Reason)
	}
}
