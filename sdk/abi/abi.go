// Package abi holds the constants and encodings of the Ludus game module ABI v1
// (docs/ABI.md) shared by the host (simnode) and the guest SDK. It has no
// dependencies beyond the standard library, so it compiles for wasip1 and native.
package abi

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"
)

// Version is the ABI version this package describes; ludus_abi_version returns it.
const Version = 1

// SpectatorSlot is the slot passed to ludus_view for the spectator camera.
const SpectatorSlot = -1

// Export names of ABI v1.
const (
	ExportABIVersion = "ludus_abi_version"
	ExportMeta       = "ludus_meta"
	ExportBuffer     = "ludus_buffer"
	ExportInit       = "ludus_init"
	ExportStep       = "ludus_step"
	ExportView       = "ludus_view"
	ExportStateHash  = "ludus_state_hash"
	ExportResult     = "ludus_result"
	ExportSave       = "ludus_save" // optional
	ExportLoad       = "ludus_load" // optional
	// ExportRender turns a snapshot (in the scratch buffer) into an indexed8
	// frame; required when Meta.SnapshotFormat is set, never called by the
	// authoritative simulation.
	ExportRender = "ludus_render"
)

// Input kinds a module declares in Meta.InputKind (docs/API.md, "Inputs").
const (
	// InputState: an input replaces the previous one (held buttons); an input
	// that arrives after a later one is superseded, not applied.
	InputState = "state"
	// InputEvent: every input applies exactly once, in seq order (shots,
	// purchases, chat). The default when a module declares nothing.
	InputEvent = "event"
)

// Step return codes.
const (
	StepRunning = 0
	StepEnded   = 1
)

// EventKind says what an event in the input log does.
type EventKind uint8

// Event kinds.
const (
	EventJoin  EventKind = 1
	EventLeave EventKind = 2
	EventInput EventKind = 3
)

func (k EventKind) String() string {
	switch k {
	case EventJoin:
		return "join"
	case EventLeave:
		return "leave"
	case EventInput:
		return "input"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// MaxPayload is the largest event payload the encoding can carry.
const MaxPayload = 0xFFFF

// Event is one entry of a tick's input: a player joining, leaving, or sending input.
type Event struct {
	Kind    EventKind
	Slot    uint8
	Payload []byte
}

// ErrMalformed is returned when event bytes cannot be decoded.
var ErrMalformed = errors.New("abi: malformed events")

// AppendEvent appends the wire encoding of ev to dst. Payloads longer than
// MaxPayload are truncated; callers validate sizes before they get here.
func AppendEvent(dst []byte, ev Event) []byte {
	p := ev.Payload
	if len(p) > MaxPayload {
		p = p[:MaxPayload]
	}
	dst = append(dst, byte(ev.Kind), ev.Slot)
	dst = binary.LittleEndian.AppendUint16(dst, uint16(len(p)))
	return append(dst, p...)
}

// AppendEvents appends the encoding of every event in evs to dst.
func AppendEvents(dst []byte, evs []Event) []byte {
	for _, ev := range evs {
		dst = AppendEvent(dst, ev)
	}
	return dst
}

// DecodeEvents calls fn for each event encoded in b, in order. Payloads alias b.
// It returns ErrMalformed if b ends in the middle of an event; events before the
// damage have already been passed to fn.
func DecodeEvents(b []byte, fn func(Event)) error {
	for len(b) > 0 {
		if len(b) < 4 {
			return ErrMalformed
		}
		n := int(binary.LittleEndian.Uint16(b[2:4]))
		if len(b) < 4+n {
			return ErrMalformed
		}
		fn(Event{Kind: EventKind(b[0]), Slot: b[1], Payload: b[4 : 4+n]})
		b = b[4+n:]
	}
	return nil
}

// Pack packs a pointer and a length into the i64 "packed slice" of the ABI.
func Pack(ptr, length uint32) uint64 { return uint64(ptr)<<32 | uint64(length) }

// Unpack splits a packed slice into pointer and length.
func Unpack(v uint64) (ptr, length uint32) { return uint32(v >> 32), uint32(v) }

// Meta is what a module declares about itself through ludus_meta.
type Meta struct {
	Name         string `json:"name"`
	TickRate     int    `json:"tick_rate"`
	MaxPlayers   int    `json:"max_players"`
	FrameDivisor int    `json:"frame_divisor"`
	ViewFormat   string `json:"view_format"`
	ViewWidth    int    `json:"view_width,omitempty"`
	ViewHeight   int    `json:"view_height,omitempty"`
	// InputKind is InputState or InputEvent; empty means InputEvent.
	InputKind string `json:"input_kind,omitempty"`
	// SnapshotFormat, when set, names what ludus_view returns: a per-player
	// snapshot that the module's ludus_render draws as an indexed8 frame of
	// ViewWidth x ViewHeight (docs/ABI.md, "Snapshots").
	SnapshotFormat string `json:"snapshot_format,omitempty"`
	// MaxDurationS is the longest a match may run, in seconds of game time
	// (ticks / tick_rate), 1..MaxDurationLimitS; 0 (absent) means
	// DefaultMaxDurationS. At it the match ends (docs/ABI.md). A tenant's
	// quota may lower it.
	MaxDurationS int `json:"max_duration_s,omitempty"`

	// The fields below are for pages that present any game (docs/ABI.md,
	// "Metadata for pages"); the platform only checks their sizes.

	// Title is the game's name as players read it (at most 64 bytes).
	Title string `json:"title,omitempty"`
	// Hint is one line telling a player what to do (at most 200 bytes).
	Hint string `json:"hint,omitempty"`
	// Controls say how a page turns held keys and touch buttons into the input
	// payload: a little-endian mask of held buttons (see Control).
	Controls []Control `json:"controls,omitempty"`
	// Bots says the module reads a bots count from CreateGame (it fills empty
	// slots with computer players), so a page may offer one.
	Bots bool `json:"bots,omitempty"`
}

// Control is one button of a module's input: while any of its keys (or its
// on-screen button) is held, bit Bit of the input payload is set. The payload a
// page sends is the mask of held bits, little-endian, in as many bytes as the
// highest declared bit needs (one byte for bits 0..7), sent each time it changes.
type Control struct {
	// Keys are KeyboardEvent.code names (physical keys, the same on every
	// layout): "ArrowUp", "KeyW", "Space", "Digit1", ... At most MaxControlKeys.
	Keys []string `json:"keys"`
	// Label names the action in key hints and on the touch button, e.g. "fire".
	Label string `json:"label"`
	// Bit is the bit of the payload this control sets, 0..MaxControlBit.
	Bit int `json:"bit"`
}

// Bounds of Meta.MaxDurationS: the default when a module declares none (one
// hour), and the most it may declare (seven days).
const (
	DefaultMaxDurationS = 3600
	MaxDurationLimitS   = 7 * 24 * 3600
)

// Limits of the page metadata (Meta.Title, Hint and Controls).
const (
	MaxTitle       = 64
	MaxHint        = 200
	MaxControls    = 32
	MaxControlKeys = 4
	MaxLabel       = 24
	MaxControlBit  = 31
	// MaxKeyName bounds a key name; names match [A-Z][A-Za-z0-9]*.
	MaxKeyName = 24
)

// Inputs returns the module's input kind, InputEvent when undeclared.
func (m Meta) Inputs() string {
	if m.InputKind == "" {
		return InputEvent
	}
	return m.InputKind
}

// ParseMeta decodes and validates module metadata.
func ParseMeta(b []byte) (Meta, error) {
	var m Meta
	if err := json.Unmarshal(b, &m); err != nil {
		return m, fmt.Errorf("ludus_meta returned invalid JSON: %w", err)
	}
	return m, m.Validate()
}

// Validate checks that the metadata is within the limits of ABI v1.
func (m Meta) Validate() error {
	switch {
	case m.Name == "" || len(m.Name) > 64:
		return fmt.Errorf("ludus_meta: name must be 1..64 bytes, got %q", m.Name)
	case m.TickRate < 1 || m.TickRate > 240:
		return fmt.Errorf("ludus_meta: tick_rate must be 1..240, got %d", m.TickRate)
	case m.MaxPlayers < 1 || m.MaxPlayers > 64:
		return fmt.Errorf("ludus_meta: max_players must be 1..64, got %d", m.MaxPlayers)
	case m.FrameDivisor < 1 || m.FrameDivisor > 240:
		return fmt.Errorf("ludus_meta: frame_divisor must be 1..240, got %d", m.FrameDivisor)
	case m.ViewFormat == "" || len(m.ViewFormat) > 32:
		return fmt.Errorf("ludus_meta: view_format must be 1..32 bytes, got %q", m.ViewFormat)
	case m.InputKind != "" && m.InputKind != InputState && m.InputKind != InputEvent:
		return fmt.Errorf("ludus_meta: input_kind must be %q or %q, got %q", InputState, InputEvent, m.InputKind)
	case m.MaxDurationS < 0 || m.MaxDurationS > MaxDurationLimitS:
		return fmt.Errorf("ludus_meta: max_duration_s must be 1..%d (seconds; absent or 0: %d), got %d", MaxDurationLimitS, DefaultMaxDurationS, m.MaxDurationS)
	case len(m.SnapshotFormat) > 32:
		return fmt.Errorf("ludus_meta: snapshot_format must be at most 32 bytes, got %q", m.SnapshotFormat)
	case m.SnapshotFormat != "" && m.ViewFormat != Indexed8Format:
		return fmt.Errorf("ludus_meta: a module with snapshot_format must render %q views, got view_format %q", Indexed8Format, m.ViewFormat)
	case m.SnapshotFormat != "" && (m.ViewWidth < 1 || m.ViewHeight < 1 || m.ViewWidth > 4096 || m.ViewHeight > 4096):
		return fmt.Errorf("ludus_meta: a module with snapshot_format must declare view_width and view_height (1..4096), got %dx%d", m.ViewWidth, m.ViewHeight)
	case m.ViewWidth < 0 || m.ViewHeight < 0 || m.ViewWidth > 4096 || m.ViewHeight > 4096:
		return fmt.Errorf("ludus_meta: view_width and view_height must be 0..4096, got %dx%d", m.ViewWidth, m.ViewHeight)
	case len(m.Title) > MaxTitle || !utf8.ValidString(m.Title):
		return fmt.Errorf("ludus_meta: title must be valid UTF-8 of at most %d bytes, got %q", MaxTitle, m.Title)
	case len(m.Hint) > MaxHint || !utf8.ValidString(m.Hint):
		return fmt.Errorf("ludus_meta: hint must be valid UTF-8 of at most %d bytes, got %d bytes", MaxHint, len(m.Hint))
	case len(m.Controls) > MaxControls:
		return fmt.Errorf("ludus_meta: at most %d controls, got %d", MaxControls, len(m.Controls))
	}
	return validateControls(m.Controls)
}

// validateControls checks each control and that no key belongs to two.
func validateControls(cs []Control) error {
	seen := map[string]int{}
	for i, c := range cs {
		switch {
		case len(c.Keys) > MaxControlKeys:
			return fmt.Errorf("ludus_meta: controls[%d] has %d keys, at most %d", i, len(c.Keys), MaxControlKeys)
		case c.Label == "" || len(c.Label) > MaxLabel || !utf8.ValidString(c.Label):
			return fmt.Errorf("ludus_meta: controls[%d].label must be valid UTF-8 of 1..%d bytes, got %q", i, MaxLabel, c.Label)
		case c.Bit < 0 || c.Bit > MaxControlBit:
			return fmt.Errorf("ludus_meta: controls[%d].bit must be 0..%d, got %d", i, MaxControlBit, c.Bit)
		}
		for _, k := range c.Keys {
			if !ValidKeyName(k) {
				return fmt.Errorf("ludus_meta: controls[%d] key %q is not a KeyboardEvent.code name ([A-Z][A-Za-z0-9]*, at most %d bytes)", i, k, MaxKeyName)
			}
			if j, dup := seen[k]; dup {
				return fmt.Errorf("ludus_meta: key %q belongs to controls[%d] and controls[%d]", k, j, i)
			}
			seen[k] = i
		}
	}
	return nil
}

// ValidKeyName reports whether k looks like a KeyboardEvent.code name:
// an upper-case ASCII letter, then letters and digits, at most MaxKeyName bytes.
func ValidKeyName(k string) bool {
	if k == "" || len(k) > MaxKeyName || k[0] < 'A' || k[0] > 'Z' {
		return false
	}
	for i := 1; i < len(k); i++ {
		c := k[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9') {
			return false
		}
	}
	return true
}

// InputBytes is the length of the payload a page builds from the controls:
// enough little-endian bytes for the highest bit declared (0 without controls).
func InputBytes(cs []Control) int {
	n := 0
	for _, c := range cs {
		n = max(n, c.Bit/8+1)
	}
	return n
}

// PlayerResult is one player's line in a match result.
type PlayerResult struct {
	Slot   int    `json:"slot"`
	Name   string `json:"name"`
	Score  int64  `json:"score"`
	Kills  int64  `json:"kills,omitempty"`
	Deaths int64  `json:"deaths,omitempty"`
}

// Result is the match result a module reports through ludus_result.
type Result struct {
	Ended   bool           `json:"ended"`
	Ticks   int64          `json:"ticks"`
	Winner  int            `json:"winner"`
	Players []PlayerResult `json:"players"`
}

// Indexed8 view format constants (docs/ABI.md).
const (
	Indexed8Format     = "indexed8"
	Indexed8Magic      = "IDX8"
	Indexed8HeaderSize = 4 + 2 + 2 + 768
)

// Indexed8Header writes the header of an indexed8 view into dst (which must hold
// Indexed8HeaderSize bytes) and returns the slice after it.
func Indexed8Header(dst []byte, width, height int, palette *[768]byte) []byte {
	copy(dst[0:4], Indexed8Magic)
	binary.LittleEndian.PutUint16(dst[4:6], uint16(width))
	binary.LittleEndian.PutUint16(dst[6:8], uint16(height))
	copy(dst[8:8+768], palette[:])
	return dst[Indexed8HeaderSize:]
}

// ParseIndexed8 checks an indexed8 view and returns its size, palette and pixels.
func ParseIndexed8(b []byte) (width, height int, palette, pixels []byte, err error) {
	if len(b) < Indexed8HeaderSize || string(b[0:4]) != Indexed8Magic {
		return 0, 0, nil, nil, errors.New("abi: not an indexed8 view")
	}
	width = int(binary.LittleEndian.Uint16(b[4:6]))
	height = int(binary.LittleEndian.Uint16(b[6:8]))
	if len(b) != Indexed8HeaderSize+width*height {
		return 0, 0, nil, nil, fmt.Errorf("abi: indexed8 view of %dx%d has %d bytes", width, height, len(b))
	}
	return width, height, b[8 : 8+768], b[Indexed8HeaderSize:], nil
}
