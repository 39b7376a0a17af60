package wasmtest

import (
	"bytes"
	"context"
	"testing"

	"github.com/tetratelabs/wazero"
)

func TestLEB(t *testing.T) {
	for _, c := range []struct {
		v    uint32
		want []byte
	}{
		{0, []byte{0x00}},
		{1, []byte{0x01}},
		{127, []byte{0x7f}},
		{128, []byte{0x80, 0x01}},
		{624485, []byte{0xe5, 0x8e, 0x26}},
		{1<<32 - 1, []byte{0xff, 0xff, 0xff, 0xff, 0x0f}},
	} {
		if got := LEB(c.v); !bytes.Equal(got, c.want) {
			t.Errorf("LEB(%d) = % x, want % x", c.v, got, c.want)
		}
	}
}

func TestSLEB(t *testing.T) {
	for _, c := range []struct {
		v    int64
		want []byte
	}{
		{0, []byte{0x00}},
		{1, []byte{0x01}},
		{-1, []byte{0x7f}},
		{63, []byte{0x3f}},
		{64, []byte{0xc0, 0x00}},
		{-64, []byte{0x40}},
		{-65, []byte{0xbf, 0x7f}},
		{-123456, []byte{0xc0, 0xbb, 0x78}},
		{1 << 62, []byte{0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0xc0, 0x00}},
	} {
		if got := SLEB(c.v); !bytes.Equal(got, c.want) {
			t.Errorf("SLEB(%d) = % x, want % x", c.v, got, c.want)
		}
	}
}

// TestModulesCompile: what Bytes makes is valid WebAssembly, with imports,
// locals, memory and data.
func TestModulesCompile(t *testing.T) {
	ctx := context.Background()
	r := wazero.NewRuntime(ctx)
	defer r.Close(ctx)
	for name, wasm := range map[string][]byte{
		"empty": Module{}.Bytes(),
		"everything": Module{
			Imports: []Import{{Module: "env", Name: "f", Params: []byte{I32}, Results: []byte{I64}}, {Module: "env", Name: "g"}},
			Funcs: []Func{
				{Export: "sum", Params: []byte{I64}, Results: []byte{I64}, NLocals: 2, LocalType: I64,
					Body: []byte{0x20, 0x00, 0x20, 0x01, 0x7c, 0x20, 0x02, 0x7c}}, // local.get 0 + local.get 1 + local.get 2
				{Body: []byte{0x10, 0x01}}, // g()
			},
			MemoryPages: 2, ExportMemory: true, Data: []byte("data"),
		}.Bytes(),
		"hostile":        Hostile("ludus_step", Cat(Spin, I32Const(0))),
		"hostile extras": Hostile("ludus_step", Cat([]byte{0x10, 0x08}, I32Const(0)), DeepFunc),
		"bomb":           Hostile("ludus_step", Cat(Bomb, I32Const(0))),
	} {
		if _, err := r.CompileModule(ctx, wasm); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// TestHostile: a hostile module's metadata is where its ludus_meta says, and
// the body it was given replaces the default.
func TestHostile(t *testing.T) {
	ctx := context.Background()
	r := wazero.NewRuntime(ctx)
	defer r.Close(ctx)
	m, err := r.Instantiate(ctx, Hostile("ludus_state_hash", I64Const(-7)))
	if err != nil {
		t.Fatal(err)
	}
	res, err := m.ExportedFunction("ludus_meta").Call(ctx)
	if err != nil {
		t.Fatal(err)
	}
	meta, ok := m.Memory().Read(uint32(res[0]>>32), uint32(res[0]))
	if !ok || string(meta) != HostileMeta {
		t.Fatalf("ludus_meta points at %q, want %q", meta, HostileMeta)
	}
	if res, err := m.ExportedFunction("ludus_state_hash").Call(ctx); err != nil || int64(res[0]) != -7 {
		t.Fatalf("ludus_state_hash = %v, %v; want -7", res, err)
	}
	if res, err := m.ExportedFunction("ludus_abi_version").Call(ctx); err != nil || res[0] != 1 {
		t.Fatalf("ludus_abi_version = %v, %v; want 1", res, err)
	}
}
