package batch

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"ludus.dev/ludus/backend/store"
	"ludus.dev/ludus/clusterstate"
	"ludus.dev/ludus/simnode/engine"
)

// Admitter admits runs: it checks a spec against its module, checks the
// spend cap and queues the run's games.
type Admitter struct {
	Etcd    *clusterstate.Client
	Backend Backend
	// Engine compiles the module to check each map's config.
	Engine *engine.Engine
	// Now is the clock; time.Now if nil.
	Now func() time.Time
	// ConfigTime bounds the time spent trying the maps' configs (each is
	// an instance's _initialize and ludus_init, up to 256 of them, on the
	// backend's CPU and charged to no run); 0 means DefaultConfigTime.
	ConfigTime time.Duration
}

// DefaultConfigTime is Admitter.ConfigTime's default: ludus_init of a map
// takes milliseconds, so 256 maps take well under it.
const DefaultConfigTime = 30 * time.Second

// ErrModuleRefusedConfig wraps a config the module's ludus_init refused.
var ErrModuleRefusedConfig = fmt.Errorf("%w: the module refused a config", ErrInvalidSpec)

// Admit checks spec, resolves its module build, tries each map's config on
// the module, admits the run against the tenant's spend cap (a
// *clusterstate.BatchCapError when refused) and queues its games. It returns
// the run as recorded in etcd.
func (a *Admitter) Admit(ctx context.Context, tenant string, spec Spec) (clusterstate.BatchRun, error) {
	now := time.Now
	if a.Now != nil {
		now = a.Now
	}
	if err := spec.Check(0); err != nil {
		return clusterstate.BatchRun{}, err
	}
	buildID, wasm, err := a.Backend.BatchModule(ctx, tenant, spec.Module, spec.BuildID)
	if err != nil {
		return clusterstate.BatchRun{}, err
	}
	// Not kept compiled: the backend only checks the run's configs on it.
	m, err := a.Engine.CompileTransient(ctx, wasm)
	if err != nil {
		return clusterstate.BatchRun{}, fmt.Errorf("%w: module build %s: %v", ErrInvalidSpec, buildID, err)
	}
	defer m.Close(context.Background())
	spec.BuildID, spec.TickRate = buildID, m.Meta.TickRate
	if spec.GameTicks == 0 {
		spec.GameTicks = int64(m.Meta.TickRate) * DefaultGameSeconds
	}
	limit := a.ConfigTime
	if limit <= 0 {
		limit = DefaultConfigTime
	}
	tries := min(len(spec.Maps), spec.Games)
	start := now()
	for i := range tries {
		if took := now().Sub(start); took > limit {
			return clusterstate.BatchRun{}, fmt.Errorf("%w: trying the maps' configs took %v, over the %v allowed, after %d of %d maps: each map's ludus_init should take milliseconds",
				ErrInvalidSpec, took.Round(time.Millisecond), limit, i, tries)
		}
		if err := ctx.Err(); err != nil {
			return clusterstate.BatchRun{}, err
		}
		if err := tryConfig(ctx, m, &spec, spec.Game(i)); err != nil {
			return clusterstate.BatchRun{}, err
		}
	}
	sb, err := json.Marshal(spec)
	if err != nil {
		return clusterstate.BatchRun{}, err
	}
	t := now().UTC()
	run := clusterstate.BatchRun{Tenant: tenant, ID: newRunID(), State: clusterstate.BatchAdmitting, Games: spec.Games,
		Deadline: t.Add(spec.Deadline), BudgetCPU: int64(spec.Budget), Spec: sb, CreatedAt: t}
	capCPU, err := a.Backend.BatchCap(ctx, tenant)
	if err != nil {
		return clusterstate.BatchRun{}, err
	}
	if err := a.Etcd.AdmitBatchRun(ctx, run, int64(capCPU)); err != nil {
		return clusterstate.BatchRun{}, err
	}
	// From here a failure leaves an admitting run, which the reaper ends as
	// orphaned (settling nothing: no game was played).
	rec := runRecord(run, clusterstate.BatchProgress{})
	rec.ExpiresAt = run.Deadline.Add(MaxDeadline) // set for real when it ends
	if err := a.Backend.PutBatchRun(ctx, rec); err != nil {
		return clusterstate.BatchRun{}, err
	}
	items := make(map[int][]byte, spec.Games)
	for n := range spec.Games {
		items[n], _ = json.Marshal(spec.Game(n))
	}
	if err := a.Etcd.PutBatchItems(ctx, tenant, run.ID, items); err != nil {
		return clusterstate.BatchRun{}, err
	}
	if err := a.Etcd.StartBatchRun(ctx, tenant, run.ID); err != nil {
		return clusterstate.BatchRun{}, err
	}
	run.State = clusterstate.BatchRunning
	return run, nil
}

// tryConfig initialises one instance of m with game g's config.
func tryConfig(ctx context.Context, m *engine.Module, spec *Spec, g Game) error {
	cfg, err := spec.Config(g)
	if err != nil {
		return fmt.Errorf("%w: map %s: %v", ErrInvalidSpec, spec.Maps[g.Map].Name, err)
	}
	inst, err := m.Instantiate(ctx, g.Seed)
	if err != nil {
		return err
	}
	defer inst.Close(context.Background())
	if err := inst.Init(ctx, g.Seed, cfg); err != nil {
		var te *engine.TrapError
		if errors.As(err, &te) {
			err = errors.New(te.Reason())
		}
		msg := err.Error()
		if out := strings.TrimSpace(inst.Output()); out != "" {
			msg += ": " + out
		}
		return fmt.Errorf("%w: map %s: %s", ErrModuleRefusedConfig, spec.Maps[g.Map].Name, msg)
	}
	return nil
}

func newRunID() string {
	var b [10]byte
	rand.Read(b[:])
	return "b" + strings.ToLower(b32.EncodeToString(b[:]))
}

// Ended record of a run as stored by the backend, for GetRun after etcd
// forgot it.
func runFromStore(r store.BatchRun) (clusterstate.BatchRun, clusterstate.BatchProgress) {
	state := clusterstate.BatchRunning
	if r.State == "ended" {
		state = clusterstate.BatchEnded
	}
	var s Spec
	_ = json.Unmarshal(r.Spec, &s)
	return clusterstate.BatchRun{Tenant: r.TenantID, ID: r.RunID, State: state, Reason: r.Reason, Games: r.Games,
			Deadline: r.CreatedAt.Add(s.Deadline), BudgetCPU: int64(s.Budget), Spec: r.Spec, CreatedAt: r.CreatedAt, EndedAt: r.EndedAt},
		clusterstate.BatchProgress{Done: r.Done, CPU: r.CPUNanos}
}
