package sdk

import (
	"errors"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// A validating JSON scanner for ConfigFields: it checks RFC 8259 syntax and
// skips values without building them, so it needs no reflection.

// maxJSONDepth bounds nesting so hostile configs cannot exhaust the stack.
const maxJSONDepth = 256

// jsonScanner validates JSON (RFC 8259) without building values.
type jsonScanner struct {
	b     []byte
	i     int
	depth int
}

func (s *jsonScanner) eof() bool  { return s.i >= len(s.b) }
func (s *jsonScanner) peek() byte { return s.b[s.i] }

func (s *jsonScanner) fail(what string) error {
	return errors.New("sdk: invalid JSON config at offset " + strconv.Itoa(s.i) + ": " + what)
}

func (s *jsonScanner) space() {
	for !s.eof() {
		switch s.peek() {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

func (s *jsonScanner) expect(c byte) bool {
	if !s.eof() && s.peek() == c {
		s.i++
		return true
	}
	return false
}

// end checks that only white space follows the top-level value.
func (s *jsonScanner) end() error {
	s.space()
	if !s.eof() {
		return s.fail("trailing data")
	}
	return nil
}

func (s *jsonScanner) value() error {
	if s.eof() {
		return s.fail("unexpected end")
	}
	switch c := s.peek(); {
	case c == '{' || c == '[':
		return s.container(c)
	case c == '"':
		return s.str()
	case c == '-' || c >= '0' && c <= '9':
		return s.number()
	case c == 't':
		return s.literal("true")
	case c == 'f':
		return s.literal("false")
	case c == 'n':
		return s.literal("null")
	}
	return s.fail("unexpected character")
}

func (s *jsonScanner) container(open byte) error {
	if s.depth++; s.depth > maxJSONDepth {
		return s.fail("nested too deeply")
	}
	defer func() { s.depth-- }()
	closing := byte(']')
	if open == '{' {
		closing = '}'
	}
	s.i++
	s.space()
	if s.expect(closing) {
		return nil
	}
	for {
		s.space()
		if open == '{' {
			if err := s.str(); err != nil {
				return err
			}
			s.space()
			if !s.expect(':') {
				return s.fail("expected ':'")
			}
			s.space()
		}
		if err := s.value(); err != nil {
			return err
		}
		s.space()
		if s.expect(closing) {
			return nil
		}
		if !s.expect(',') {
			return s.fail("expected ',' or a closing bracket")
		}
	}
}

func (s *jsonScanner) literal(word string) error {
	if len(s.b)-s.i < len(word) || string(s.b[s.i:s.i+len(word)]) != word {
		return s.fail("invalid literal")
	}
	s.i += len(word)
	return nil
}

func (s *jsonScanner) digits() int {
	n := 0
	for !s.eof() && s.peek() >= '0' && s.peek() <= '9' {
		s.i++
		n++
	}
	return n
}

func (s *jsonScanner) number() error {
	s.expect('-')
	switch {
	case s.expect('0'):
	case s.digits() == 0:
		return s.fail("invalid number")
	}
	if s.expect('.') && s.digits() == 0 {
		return s.fail("invalid fraction")
	}
	if s.expect('e') || s.expect('E') {
		if !s.expect('+') {
			s.expect('-')
		}
		if s.digits() == 0 {
			return s.fail("invalid exponent")
		}
	}
	return nil
}

func (s *jsonScanner) str() error {
	if !s.expect('"') {
		return s.fail("expected a string")
	}
	for !s.eof() {
		c := s.peek()
		s.i++
		switch {
		case c == '"':
			return nil
		case c < 0x20:
			return s.fail("control character in string")
		case c == '\\':
			if s.eof() {
				return s.fail("unexpected end")
			}
			e := s.peek()
			s.i++
			switch e {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if len(s.b)-s.i < 4 {
					return s.fail("short \\u escape")
				}
				for k := 0; k < 4; k++ {
					if hexVal(s.b[s.i+k]) < 0 {
						return s.fail("invalid \\u escape")
					}
				}
				s.i += 4
			default:
				return s.fail("invalid escape")
			}
		}
	}
	return s.fail("unterminated string")
}

func hexVal(c byte) rune {
	switch {
	case c >= '0' && c <= '9':
		return rune(c - '0')
	case c >= 'a' && c <= 'f':
		return rune(c - 'a' + 10)
	case c >= 'A' && c <= 'F':
		return rune(c - 'A' + 10)
	}
	return -1
}

// unquote decodes a validated JSON string literal (with its quotes) the way
// encoding/json does: invalid UTF-8 and lone surrogates become U+FFFD.
func unquote(q []byte) string {
	b := q[1 : len(q)-1]
	out := make([]byte, 0, len(b))
	for i := 0; i < len(b); {
		c := b[i]
		if c != '\\' {
			r, n := utf8.DecodeRune(b[i:])
			out = utf8.AppendRune(out, r)
			i += n
			continue
		}
		e := b[i+1]
		i += 2
		switch e {
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r := hex4(b[i:])
			i += 4
			if utf16.IsSurrogate(r) {
				r2 := rune(-1)
				if len(b)-i >= 6 && b[i] == '\\' && b[i+1] == 'u' {
					r2 = hex4(b[i+2:])
				}
				if d := utf16.DecodeRune(r, r2); d != utf8.RuneError {
					r = d
					i += 6
				} else {
					r = utf8.RuneError
				}
			}
			out = utf8.AppendRune(out, r)
		default: // '"', '\\', '/'
			out = append(out, e)
		}
	}
	return string(out)
}

func hex4(b []byte) rune {
	return hexVal(b[0])<<12 | hexVal(b[1])<<8 | hexVal(b[2])<<4 | hexVal(b[3])
}
