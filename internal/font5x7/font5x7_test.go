package font5x7

import "testing"

func TestGlyph(t *testing.T) {
	if Glyph('a') != Glyph('A') {
		t.Error("lower case is not drawn as capitals")
	}
	if Glyph('~') != Glyph('?') || Glyph(200) != Glyph('?') {
		t.Error("a byte without a glyph is not drawn as '?'")
	}
	if *Glyph(' ') != [H]byte{} {
		t.Error("space is not blank")
	}
	for _, c := range []byte("0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ%") {
		g := Glyph(c)
		if c != '?' && g == Glyph('?') {
			t.Errorf("%q has no glyph", c)
		}
		for _, row := range g {
			if row >= 1<<W {
				t.Errorf("%q is wider than %d columns", c, W)
			}
		}
	}
}
