package backend_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"ludus.dev/ludus/backend"
	"ludus.dev/ludus/backend/store"
	"ludus.dev/ludus/backend/store/postgres"
	"ludus.dev/ludus/backend/store/postgres/pgtest"
	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
)

// privatePostgres is a throwaway PostgreSQL cluster the test may restart
// (the shared LUDUS_TEST_POSTGRES server must not be).
type privatePostgres struct {
	t      *testing.T
	bin    string
	dir    string
	asUser bool // run as the postgres user (we are root)
	port   int
	dsn    string
}

func (p *privatePostgres) run(name string, args ...string) {
	p.t.Helper()
	path := filepath.Join(p.bin, name)
	cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var cmd *exec.Cmd
	if p.asUser {
		cmd = exec.CommandContext(cctx, "runuser", append([]string{"-u", "postgres", "--", path}, args...)...)
	} else {
		cmd = exec.CommandContext(cctx, path, args...)
	}
	cmd.WaitDelay = 5 * time.Second // never wait for a pipe the server inherited
	if out, err := cmd.CombinedOutput(); err != nil {
		p.t.Fatalf("%s %v: %v\n%s", name, args, err, out)
	}
}

// startPrivatePostgres starts a cluster with initdb and pg_ctl from
// /usr/lib/postgresql/*/bin, or skips (fails under CI) when it cannot.
func startPrivatePostgres(t *testing.T) *privatePostgres {
	pgtest.DSN(t) // the PostgreSQL tests' switch: skip without it, as they do
	unavailable := func(why string) {
		if os.Getenv("CI") != "" {
			t.Fatalf("cannot start a private PostgreSQL under CI: %s", why)
		}
		t.Skipf("cannot start a private PostgreSQL to restart: %s", why)
	}
	bins, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pg_ctl")
	if len(bins) == 0 {
		unavailable("no /usr/lib/postgresql/*/bin/pg_ctl")
	}
	sort.Slice(bins, func(i, j int) bool { // highest major version
		vi, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(bins[i]))))
		vj, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(bins[j]))))
		return vi > vj
	})
	p := &privatePostgres{t: t, bin: filepath.Dir(bins[0]), asUser: os.Geteuid() == 0}
	dir, err := os.MkdirTemp("", "ludus-pgrestart-")
	if err != nil {
		t.Fatal(err)
	}
	p.dir = dir
	t.Cleanup(func() { os.RemoveAll(dir) })
	dbUser := "postgres"
	if p.asUser {
		u, err := user.Lookup("postgres")
		if err != nil {
			unavailable("running as root and there is no postgres user")
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
	} else if u, err := user.Current(); err == nil {
		dbUser = u.Username
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	p.run("initdb", "-D", filepath.Join(dir, "data"), "-A", "trust", "-U", dbUser, "--no-sync")
	p.port = port
	p.start()
	t.Cleanup(func() {
		p.run("pg_ctl", "-D", filepath.Join(dir, "data"), "-m", "immediate", "-w", "stop")
	})
	p.dsn = fmt.Sprintf("postgres://%s@127.0.0.1:%d/postgres?sslmode=disable&connect_timeout=5", dbUser, port)
	return p
}

func (p *privatePostgres) start() {
	p.t.Helper()
	p.run("pg_ctl", "-D", filepath.Join(p.dir, "data"), "-l", filepath.Join(p.dir, "log"), "-w",
		"-o", fmt.Sprintf("-k %s -h 127.0.0.1 -p %d -c max_connections=50", p.dir, p.port), "start")
}

// restart stops the server abruptly (like a crash: open connections break,
// in-flight transactions are lost unless committed) and starts it again.
func (p *privatePostgres) restart() {
	p.t.Helper()
	p.run("pg_ctl", "-D", filepath.Join(p.dir, "data"), "-m", "immediate", "-w", "stop")
	p.start() // with its log file: pg_ctl restart would hand the server our output pipe

}

// TestPostgresRestartDuringResults delivers match results while PostgreSQL
// restarts: every result is applied exactly once (nothing lost, nothing
// doubled), because each report is one transaction that first claims the
// match row, and the reporter retries until it gets an answer.
func TestPostgresRestartDuringResults(t *testing.T) {
	pg := startPrivatePostgres(t)
	e := &env{t: t, clock: &fakeClock{t: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}, fleet: &fakeFleet{}, logs: &syncBuffer{}}
	e.reopen = func() store.Store {
		st, err := postgres.Open(ctx, pg.dsn)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	e.store = e.reopen()
	e.startWith(e.store)
	tn, admin := e.createTenant("restart")
	var players []*ludusv1.PlayerResult
	for i := range 2 {
		g := e.guestLogin("restart", fmt.Sprintf("device-restart-%04d", i), "")
		players = append(players, &ludusv1.PlayerResult{AccountId: g.AccountId, Score: int64(i + 1), Xp: 10, Currency: map[string]int64{"gold": 3}})
	}
	const matches = 60
	creds := make([]string, matches)
	for i := range creds {
		creds[i] = e.mint(tn.Id, fmt.Sprintf("m-%03d", i), "arena")
	}

	dctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	var mu sync.Mutex
	applied := 0
	errs := make(chan error, matches)
	next := make(chan int)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				ok, err := backend.NewMatchReporter(e.http.Client(), e.http.URL, fmt.Sprintf("m-%03d", i), creds[i]).ReportResult(dctx, int64(i), players)
				if err != nil {
					errs <- fmt.Errorf("match %d: %w", i, err)
					continue
				}
				if ok {
					mu.Lock()
					applied++
					mu.Unlock()
				}
			}
		}()
	}
	for i := range matches {
		if i == matches/3 {
			pg.restart() // mid-delivery: reports in flight fail and are retried
		}
		next <- i
		time.Sleep(5 * time.Millisecond)
	}
	close(next)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}

	// Every match has its result once; each player got exactly one grant
	// per match (a report whose commit was acknowledged only after the
	// restart answers applied=false when retried, so count stored ones).
	rs, err := e.admin.ListMatchResults(ctx, req(&ludusv1.ListMatchResultsRequest{Limit: 1000}, admin))
	if err != nil {
		t.Fatal(err)
	}
	if n := len(rs.Msg.Results); n != matches {
		t.Fatalf("%d results stored, want %d", n, matches)
	}
	if applied > matches {
		t.Fatalf("%d reports applied, more than %d matches", applied, matches)
	}
	for _, p := range players {
		pr := e.progression(admin, p.AccountId)
		if pr.Xp != 10*matches || pr.Currency["gold"] != 3*matches {
			t.Fatalf("player %s: xp %d gold %d, want %d and %d (exactly once per match)", p.AccountId, pr.Xp, pr.Currency["gold"], 10*matches, 3*matches)
		}
	}
	t.Logf("%d matches, %d acknowledged as applied, the rest applied before a lost answer", matches, applied)
}
