package sdk

import (
	"errors"
	"strconv"
)

// ConfigFields reads a match config that is a JSON object and calls fn for
// each top-level member, in document order, with its (unescaped) key and raw
// value. Empty input, white space only and JSON null mean "no members". Any
// malformed JSON is an error, even inside members the game ignores; an error
// from fn stops the walk and is returned.
//
// It exists so that games need not link encoding/json, which roughly doubles
// the size of a module (and its compile time on every node). Keys are matched
// exactly (encoding/json also matches them case-insensitively).
func ConfigFields(config []byte, fn func(key string, v JSONValue) error) error {
	s := jsonScanner{b: config}
	s.space()
	if s.eof() {
		return nil
	}
	if s.peek() == 'n' {
		if err := s.value(); err != nil {
			return err
		}
		return s.end()
	}
	if !s.expect('{') {
		return s.fail("expected an object")
	}
	s.space()
	if s.expect('}') {
		return s.end()
	}
	for {
		s.space()
		k0 := s.i
		if err := s.str(); err != nil {
			return err
		}
		key := unquote(s.b[k0:s.i])
		s.space()
		if !s.expect(':') {
			return s.fail("expected ':'")
		}
		s.space()
		v0 := s.i
		if err := s.value(); err != nil {
			return err
		}
		if err := fn(key, JSONValue(s.b[v0:s.i])); err != nil {
			return err
		}
		s.space()
		if s.expect('}') {
			return s.end()
		}
		if !s.expect(',') {
			return s.fail("expected ',' or '}'")
		}
	}
}

// JSONValue is the raw text of one syntactically valid JSON value.
type JSONValue []byte

// ErrJSONType is returned by JSONValue accessors for a value of another type.
var ErrJSONType = errors.New("sdk: JSON value has the wrong type")

// IsNull reports whether v is null. Games usually treat a null member as absent.
func (v JSONValue) IsNull() bool { return string(v) == "null" }

// Int returns v as an integer. Fractions and exponents are errors, as for
// encoding/json decoding into an int.
func (v JSONValue) Int() (int64, error) {
	n, err := strconv.ParseInt(string(v), 10, 64)
	if err != nil {
		return 0, ErrJSONType
	}
	return n, nil
}

// Bool returns v as a boolean.
func (v JSONValue) Bool() (bool, error) {
	switch string(v) {
	case "true":
		return true, nil
	case "false":
		return false, nil
	}
	return false, ErrJSONType
}

// Str returns v as a string, unescaped.
func (v JSONValue) Str() (string, error) {
	if len(v) < 2 || v[0] != '"' {
		return "", ErrJSONType
	}
	return unquote(v), nil
}
