package abi

import (
	"encoding/json"
	"strings"
	"testing"
)

func validMeta() Meta {
	return Meta{Name: "g", TickRate: 30, MaxPlayers: 2, FrameDivisor: 1, ViewFormat: "indexed8", ViewWidth: 320, ViewHeight: 200}
}

func TestMetaPageFields(t *testing.T) {
	m := validMeta()
	m.Title = "Arena"
	m.Hint = "Shoot the others."
	m.Bots = true
	m.Controls = []Control{{Keys: []string{"ArrowUp", "KeyW"}, Label: "forward", Bit: 0}, {Keys: []string{"Space"}, Label: "fire", Bit: 31}, {Label: "touch only", Bit: 3}}
	if err := m.Validate(); err != nil {
		t.Fatalf("valid meta: %v", err)
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	back, err := ParseMeta(b)
	if err != nil {
		t.Fatal(err)
	}
	if back.Title != m.Title || back.Hint != m.Hint || !back.Bots || len(back.Controls) != 3 || back.Controls[1].Bit != 31 || back.Controls[0].Keys[1] != "KeyW" {
		t.Fatalf("round trip: %+v", back)
	}
	if n := InputBytes(m.Controls); n != 4 {
		t.Errorf("InputBytes with bit 31 = %d, want 4", n)
	}
	if n := InputBytes(m.Controls[:1]); n != 1 {
		t.Errorf("InputBytes with bit 0 = %d, want 1", n)
	}
	if n := InputBytes(nil); n != 0 {
		t.Errorf("InputBytes without controls = %d, want 0", n)
	}
	// Older metadata (no page fields) stays valid.
	if _, err := ParseMeta([]byte(`{"name":"arena","tick_rate":35,"max_players":8,"frame_divisor":2,"view_format":"indexed8"}`)); err != nil {
		t.Fatal(err)
	}
}

func TestMetaPageFieldsRejected(t *testing.T) {
	many := make([]Control, MaxControls+1)
	for i := range many {
		many[i] = Control{Label: "x", Bit: i % 32}
	}
	cases := map[string]func(m *Meta){
		"title too long":    func(m *Meta) { m.Title = strings.Repeat("t", MaxTitle+1) },
		"title not UTF-8":   func(m *Meta) { m.Title = "\xff" },
		"hint too long":     func(m *Meta) { m.Hint = strings.Repeat("h", MaxHint+1) },
		"too many controls": func(m *Meta) { m.Controls = many },
		"too many keys": func(m *Meta) {
			m.Controls = []Control{{Keys: []string{"KeyA", "KeyB", "KeyC", "KeyD", "KeyE"}, Label: "a"}}
		},
		"empty label":      func(m *Meta) { m.Controls = []Control{{Keys: []string{"KeyA"}}} },
		"long label":       func(m *Meta) { m.Controls = []Control{{Label: strings.Repeat("l", MaxLabel+1)}} },
		"negative bit":     func(m *Meta) { m.Controls = []Control{{Label: "a", Bit: -1}} },
		"bit too high":     func(m *Meta) { m.Controls = []Control{{Label: "a", Bit: MaxControlBit + 1}} },
		"lower-case key":   func(m *Meta) { m.Controls = []Control{{Keys: []string{"w"}, Label: "a"}} },
		"empty key":        func(m *Meta) { m.Controls = []Control{{Keys: []string{""}, Label: "a"}} },
		"key with a space": func(m *Meta) { m.Controls = []Control{{Keys: []string{"Key W"}, Label: "a"}} },
		"key too long": func(m *Meta) {
			m.Controls = []Control{{Keys: []string{"K" + strings.Repeat("e", MaxKeyName)}, Label: "a"}}
		},
		"key in two controls": func(m *Meta) {
			m.Controls = []Control{{Keys: []string{"KeyA"}, Label: "a"}, {Keys: []string{"KeyA"}, Label: "b", Bit: 1}}
		},
		"negative view size": func(m *Meta) { m.ViewWidth = -1 },
		"view too wide":      func(m *Meta) { m.ViewWidth = 4097 },
	}
	for name, mutate := range cases {
		m := validMeta()
		mutate(&m)
		if err := m.Validate(); err == nil {
			t.Errorf("%s: accepted %+v", name, m)
		}
	}
}

func TestValidKeyName(t *testing.T) {
	for _, k := range []string{"ArrowUp", "KeyW", "Space", "Digit1", "Numpad8", "F12", "ShiftLeft"} {
		if !ValidKeyName(k) {
			t.Errorf("%q rejected", k)
		}
	}
	for _, k := range []string{"", "w", "arrowUp", "Key-W", "Key W", "Ключ", strings.Repeat("A", MaxKeyName+1)} {
		if ValidKeyName(k) {
			t.Errorf("%q accepted", k)
		}
	}
}

func TestMetaMaxDuration(t *testing.T) {
	m, err := ParseMeta([]byte(`{"name":"g","tick_rate":30,"max_players":2,"frame_divisor":1,"view_format":"indexed8","max_duration_s":900}`))
	if err != nil || m.MaxDurationS != 900 {
		t.Fatalf("max_duration_s 900: %+v, %v", m, err)
	}
	for _, ok := range []int{0, 1, MaxDurationLimitS} {
		m := validMeta()
		m.MaxDurationS = ok
		if err := m.Validate(); err != nil {
			t.Errorf("max_duration_s %d refused: %v", ok, err)
		}
	}
	for _, bad := range []int{-1, MaxDurationLimitS + 1} {
		m := validMeta()
		m.MaxDurationS = bad
		if err := m.Validate(); err == nil || !strings.Contains(err.Error(), "max_duration_s") {
			t.Errorf("max_duration_s %d: err = %v, want a refusal naming max_duration_s", bad, err)
		}
	}
}

// Metadata at every bound fits well within MaxMetaBytes (which the engine
// checks before decoding: TestMetaTooLarge in simnode/engine).
func TestMetaSize(t *testing.T) {
	m := validMeta()
	m.Title, m.Hint = strings.Repeat("\u2028", MaxTitle/3), strings.Repeat("\u2028", MaxHint/3)
	for i := range MaxControls {
		keys := make([]string, MaxControlKeys)
		for k := range keys {
			keys[k] = "K" + strings.Repeat("x", MaxKeyName-4) + string(rune('a'+i%26)) + string(rune('a'+i/26)) + string(rune('a'+k))
		}
		m.Controls = append(m.Controls, Control{Label: strings.Repeat("\u2028", MaxLabel/3), Keys: keys, Bit: i % (MaxControlBit + 1)})
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ParseMeta(b); err != nil {
		t.Fatalf("metadata at every bound (%d bytes): %v", len(b), err)
	}
	if len(b) > MaxMetaBytes/2 {
		t.Fatalf("metadata at every bound is %d bytes, over half of MaxMetaBytes", len(b))
	}
}
