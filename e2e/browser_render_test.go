package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"ludus.dev/ludus/games/builtin"
	"ludus.dev/ludus/sdk/abi"
	"ludus.dev/ludus/simnode/engine"
	"ludus.dev/ludus/web"
)

// TestBrowserRendersSnapshots checks that the browser draws exactly what the node
// would: arena snapshots (from the real module run by wazero) rendered in headless
// Chromium by the web bundle's render worker (dist/render-worker.js, with the
// module fetched by build id and ticket, its SHA-256 checked, and the page's WASI
// shim) give byte-identical indexed8 frames (compared by SHA-256) to the same
// snapshots rendered by wazero on the Go side (engine.Renderer). It also checks
// that the worker refuses a module whose bytes do not hash to the build id and one
// it may not fetch, and logs the browser's render time per frame
// (docs/BENCHMARKS.md).
func TestBrowserRendersSnapshots(t *testing.T) {
	chromium, script := browserTools(t, "render.mjs")
	page, err := os.ReadFile("../web/e2e/render.html")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	eng, err := engine.New(ctx, engine.Config{CacheDir: sharedCache()})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close(context.Background())
	m, err := eng.Compile(ctx, builtin.Arena)
	if err != nil {
		t.Fatal(err)
	}
	if m.Meta.SnapshotFormat == "" {
		t.Fatal("the built-in arena module declares no snapshot_format: it has no renderer to run in the browser")
	}
	snaps := arenaSnapshots(ctx, t, m)

	// The reference: the same snapshots rendered by wazero, as a node does for
	// thin clients.
	rend, err := m.NewRenderer(ctx, engine.InstanceOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if c, ok := any(rend).(interface{ Close(context.Context) error }); ok {
		defer c.Close(context.Background())
	}
	want := make([]string, len(snaps))
	wantRGBA := make([]string, len(snaps))
	var goTimes []time.Duration
	for round := 0; round < 3; round++ {
		for i, s := range snaps {
			t0 := time.Now()
			frame, err := rend.Render(ctx, s)
			goTimes = append(goTimes, time.Since(t0))
			if err != nil {
				t.Fatalf("wazero render of snapshot %d: %v", i, err)
			}
			if _, _, _, _, err := abi.ParseIndexed8(frame); err != nil {
				t.Fatalf("wazero render of snapshot %d: %v", i, err)
			}
			sum := sha256.Sum256(frame)
			if h := hex.EncodeToString(sum[:]); round == 0 {
				want[i] = h
				wantRGBA[i] = rgbaHash(frame)
			} else if h != want[i] {
				t.Fatalf("wazero renders snapshot %d differently the second time: the render is not pure", i)
			}
		}
	}

	const ticket = "render-test-ticket"
	badID := engine.BuildID([]byte("not the arena module"))
	var blob []byte
	for _, s := range snaps {
		blob = binary.LittleEndian.AppendUint32(blob, uint32(len(s)))
		blob = append(blob, s...)
	}
	caseJSON, _ := json.Marshal(map[string]any{"buildId": m.BuildID, "badBuildId": badID, "ticket": ticket,
		"rounds": 2, "intervalMs": 1000 / m.Meta.TickRate})
	assets := web.Handler()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Write(page)
	})
	mux.Handle("GET /render-worker.js", assets)
	mux.HandleFunc("GET /case.json", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write(caseJSON)
	})
	mux.HandleFunc("GET /snapshots.bin", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Write(blob)
	})
	// As the gateway's GET /modules/{build_id}.wasm: the ticket is required; badID
	// answers the arena's bytes, which do not hash to it.
	mux.HandleFunc("GET /modules/{file}", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+ticket {
			http.Error(w, "missing or bad ticket", http.StatusUnauthorized)
			return
		}
		id, ok := strings.CutSuffix(r.PathValue("file"), ".wasm")
		if !ok || (id != m.BuildID && id != badID) {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/wasm")
		w.Header().Set("ETag", `"`+id+`"`)
		w.Header().Set("Cache-Control", "public, max-age=31536000, immutable")
		w.Write(builtin.Arena)
	})
	// Cross-origin isolation gives the page and the worker performance.now() at
	// 5 µs rather than 100 µs, for the timings below.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cross-Origin-Opener-Policy", "same-origin")
		w.Header().Set("Cross-Origin-Embedder-Policy", "require-corp")
		mux.ServeHTTP(w, r)
	}))
	defer srv.Close()

	cmd := exec.CommandContext(ctx, "node", script, srv.URL+"/")
	cmd.Env = append(os.Environ(), "CHROMIUM="+chromium)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if stderr.Len() > 0 {
		t.Logf("render.mjs: %s", stderr.String())
	}
	if err != nil {
		t.Fatalf("render.mjs: %v", err)
	}
	type timing struct {
		Frames           int      `json:"frames"`
		MedianMs         *float64 `json:"medianMs"`
		WasmMedianMs     *float64 `json:"wasmMedianMs"`
		PageDrawMedianMs *float64 `json:"pageDrawMedianMs"`
		LastHash         string   `json:"lastHash"`
		Bitmap           bool     `json:"bitmap"`
	}
	type answer struct {
		Type    string `json:"type"`
		Stage   string `json:"stage"`
		Message string `json:"message"`
	}
	var res struct {
		Error     string   `json:"error"`
		UserAgent string   `json:"userAgent"`
		Snapshots int      `json:"snapshots"`
		Hashes    []string `json:"hashes"`
		RGBA      []string `json:"rgbaHashes"`
		Sizes     []string `json:"sizes"`
		Ready     struct {
			Bytes     int     `json:"bytes"`
			FetchMs   float64 `json:"fetchMs"`
			CompileMs float64 `json:"compileMs"`
			InitMs    float64 `json:"initMs"`
		} `json:"ready"`
		Bitmap    timing `json:"bitmap"`
		Offscreen timing `json:"offscreen"`
		Tampered  answer `json:"tampered"`
		NoTicket  answer `json:"noTicket"`
	}
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("render.mjs printed %q: %v", out, err)
	}
	if res.Error != "" {
		t.Fatalf("render page failed: %s", res.Error)
	}
	if res.Snapshots != len(snaps) || len(res.Hashes) != len(snaps) || len(res.RGBA) != len(snaps) || len(res.Sizes) != len(snaps) {
		t.Fatalf("the page rendered %d of %d snapshots (%d hashes)", res.Snapshots, len(snaps), len(res.Hashes))
	}
	size := fmt.Sprintf("%dx%d", m.Meta.ViewWidth, m.Meta.ViewHeight)
	differ := 0
	for i := range snaps {
		if res.Hashes[i] != want[i] {
			if differ < 5 {
				t.Errorf("snapshot %d (%d bytes): the browser drew a frame with SHA-256 %s, wazero %s", i, len(snaps[i]), res.Hashes[i], want[i])
			}
			differ++
		}
		if res.Hashes[i] == want[i] && res.RGBA[i] != wantRGBA[i] {
			t.Errorf("snapshot %d: the right indexed8 frame, but the page's canvas holds other RGBA pixels (SHA-256 %s, want %s)", i, res.RGBA[i], wantRGBA[i])
		}
		if res.Sizes[i] != size {
			t.Errorf("snapshot %d: the browser drew %s, want %s", i, res.Sizes[i], size)
		}
	}
	if differ > 0 {
		t.Errorf("%d of %d frames differ between the browser and wazero", differ, len(snaps))
	}
	if res.Offscreen.LastHash != want[len(want)-1] || res.Offscreen.Bitmap {
		t.Errorf("on a transferred canvas: last frame %s (bitmap sent back: %v), want %s and none", res.Offscreen.LastHash, res.Offscreen.Bitmap, want[len(want)-1])
	}
	if res.Tampered.Type != "error" || res.Tampered.Stage != "verify" {
		t.Errorf("a module whose bytes do not hash to its build id was not refused: %+v", res.Tampered)
	}
	if res.NoTicket.Type != "error" || res.NoTicket.Stage != "fetch" || !strings.Contains(res.NoTicket.Message, "401") {
		t.Errorf("fetching the module without a ticket: %+v, want a fetch error with 401", res.NoTicket)
	}

	ms := func(p *float64) float64 {
		if p == nil {
			return -1
		}
		return *p
	}
	slices.Sort(goTimes)
	t.Logf("browser: %s", res.UserAgent)
	t.Logf("module load in the worker: %d bytes, fetch %.1f ms, SHA-256 + compile %.1f ms, instantiate + _initialize %.1f ms",
		res.Ready.Bytes, res.Ready.FetchMs, res.Ready.CompileMs, res.Ready.InitMs)
	t.Logf("browser render per frame, median of %d at %d snapshots/s (snapshot in the worker to an ImageBitmap, as the page does): %.3f ms, of which ludus_render %.3f ms; page drawImage %.3f ms",
		res.Bitmap.Frames, m.Meta.TickRate, ms(res.Bitmap.MedianMs), ms(res.Bitmap.WasmMedianMs), ms(res.Bitmap.PageDrawMedianMs))
	t.Logf("browser render per frame on a canvas transferred to the worker, median of %d: %.3f ms",
		res.Offscreen.Frames, ms(res.Offscreen.MedianMs))
	t.Logf("wazero (engine.Renderer) render per frame, median of %d: %.3f ms", len(goTimes), float64(goTimes[len(goTimes)/2].Microseconds())/1000)
	t.Logf("%d snapshots, %d frames identical in the browser and in wazero", len(snaps), len(snaps)-differ)
}

// arenaSnapshots runs the arena in wazero (3 bots, in the highest slots, and one
// player in slot 0 who turns, walks and fires) and returns what ludus_view gives
// the spectator, the player and a bot every 35 ticks, then two snapshots that are not valid (the module must draw a
// frame for them anyway).
func arenaSnapshots(ctx context.Context, t *testing.T, m *engine.Module) [][]byte {
	t.Helper()
	const seed = 20260801
	inst, err := m.Instantiate(ctx, seed)
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Close(ctx)
	if err := inst.Init(ctx, seed, []byte(`{"bots":3,"score_limit":1000,"time_limit_s":3600}`)); err != nil {
		t.Fatal(err)
	}
	const player, bot = 0, 7
	if _, err := inst.Step(ctx, []abi.Event{{Kind: abi.EventJoin, Slot: player, Payload: []byte("viewer")}}); err != nil {
		t.Fatal(err)
	}
	var snaps [][]byte
	for tick := 1; tick <= 700; tick++ {
		var evs []abi.Event
		if tick%70 == 1 {
			// bit 0 forward, bit 2 turn left, bit 6 fire (docs/ABI.md)
			mask := []byte{0b0000_0101, 0b0100_0001, 0b0000_0100, 0b0000_0001}[(tick/70)%4]
			evs = []abi.Event{{Kind: abi.EventInput, Slot: player, Payload: []byte{mask}}}
		}
		if _, err := inst.Step(ctx, evs); err != nil {
			t.Fatal(err)
		}
		if tick%35 != 0 {
			continue
		}
		for _, slot := range []int{abi.SpectatorSlot, player, bot} {
			v, err := inst.View(ctx, slot)
			if err != nil {
				t.Fatal(err)
			}
			snaps = append(snaps, slices.Clone(v))
		}
	}
	last := snaps[len(snaps)-1]
	snaps = append(snaps, slices.Clone(last[:len(last)/2]), []byte("definitely not a snapshot"))
	return snaps
}

// rgbaHash is the SHA-256 of an indexed8 frame's pixels as a canvas holds them:
// R, G, B from the palette, alpha 255.
func rgbaHash(frame []byte) string {
	w, h, palette, pixels, err := abi.ParseIndexed8(frame)
	if err != nil {
		return err.Error()
	}
	rgba := make([]byte, 0, 4*w*h)
	for _, p := range pixels {
		rgba = append(rgba, palette[3*int(p)], palette[3*int(p)+1], palette[3*int(p)+2], 255)
	}
	sum := sha256.Sum256(rgba)
	return hex.EncodeToString(sum[:])
}

// browserTools finds chromium, node and playwright-core as TestBrowserPlays does
// (skipping without them, failing under CI) and returns chromium's path and the
// absolute path of the web/e2e script.
func browserTools(t *testing.T, script string) (chromium, path string) {
	t.Helper()
	chromium = os.Getenv("CHROMIUM")
	if chromium == "" {
		chromium = "/usr/bin/chromium"
	}
	path, _ = filepath.Abs(filepath.Join("../web/e2e", script))
	missing := ""
	if _, err := os.Stat(chromium); err != nil {
		missing = "chromium (apt-get install chromium)"
	} else if _, err := os.Stat("../web/node_modules/playwright-core"); err != nil {
		missing = "playwright-core (cd web && npm ci)"
	} else if _, err := exec.LookPath("node"); err != nil {
		missing = "node"
	}
	if missing != "" {
		if os.Getenv("CI") != "" {
			t.Fatalf("browser test needs %s; .ci/run installs it", missing)
		}
		t.Skipf("browser test needs %s", missing)
	}
	return chromium, path
}
