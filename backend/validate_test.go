package backend

import (
	"strings"
	"testing"
)

func TestCleanName(t *testing.T) {
	for _, tt := range []struct {
		in, want, err string
	}{
		{"  Ada  ", "Ada", ""},
		{"", "", ""},
		{"   ", "", ""},
		{strings.Repeat("é", 32), strings.Repeat("é", 32), ""},
		{strings.Repeat("é", 33), "", "at most 32"},
		{"bad \xff utf8", "", "UTF-8"},
		{"tab\there", "", "U+0009"},
		{"zero\u200bwidth", "", "U+200B"},
		{"🎮 gamer 名前", "🎮 gamer 名前", ""},
	} {
		got, err := cleanName("display_name", tt.in, MaxDisplayNameLen)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("cleanName(%q) error = %v, want %q", tt.in, err, tt.err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("cleanName(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
}

func TestClip(t *testing.T) {
	s := strings.Repeat("é", 40) // 80 bytes
	c := clip(s)
	if len(c) > 64+len("…") || !strings.HasSuffix(c, "…") || strings.ContainsRune(c, '\uFFFD') {
		t.Errorf("clip = %q", c)
	}
	if clip("short") != "short" {
		t.Error("clip changed a short string")
	}
}

func TestGuestNameStable(t *testing.T) {
	if guestName("a_x") != guestName("a_x") || guestName("a_x") == guestName("a_y") {
		t.Error("guestName not a stable function of the id")
	}
}
