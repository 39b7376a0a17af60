package sdk

import (
	"strconv"
	"unicode/utf8"

	"ludus.dev/ludus/sdk/abi"
)

// The exports encode Meta and Result by hand rather than with encoding/json:
// linking its reflection-based encoder and decoder costs about 1 MB of wasm.
// The output is byte-for-byte what json.Marshal produces (json_test.go checks
// this, and fails when abi gains a field that is not encoded here).

// AppendMetaJSON appends the JSON encoding of m to dst.
func AppendMetaJSON(dst []byte, m abi.Meta) []byte {
	dst = append(dst, `{"name":`...)
	dst = appendJSONString(dst, m.Name)
	dst = appendIntField(dst, `,"tick_rate":`, int64(m.TickRate))
	dst = appendIntField(dst, `,"max_players":`, int64(m.MaxPlayers))
	dst = appendIntField(dst, `,"frame_divisor":`, int64(m.FrameDivisor))
	dst = append(dst, `,"view_format":`...)
	dst = appendJSONString(dst, m.ViewFormat)
	if m.ViewWidth != 0 {
		dst = appendIntField(dst, `,"view_width":`, int64(m.ViewWidth))
	}
	if m.ViewHeight != 0 {
		dst = appendIntField(dst, `,"view_height":`, int64(m.ViewHeight))
	}
	if m.InputKind != "" {
		dst = append(dst, `,"input_kind":`...)
		dst = appendJSONString(dst, m.InputKind)
	}
	if m.SnapshotFormat != "" {
		dst = append(dst, `,"snapshot_format":`...)
		dst = appendJSONString(dst, m.SnapshotFormat)
	}
	if m.MaxDurationS != 0 {
		dst = appendIntField(dst, `,"max_duration_s":`, int64(m.MaxDurationS))
	}
	if m.Title != "" {
		dst = append(dst, `,"title":`...)
		dst = appendJSONString(dst, m.Title)
	}
	if m.Hint != "" {
		dst = append(dst, `,"hint":`...)
		dst = appendJSONString(dst, m.Hint)
	}
	if len(m.Controls) > 0 {
		dst = append(dst, `,"controls":[`...)
		for i, c := range m.Controls {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, `{"keys":`...)
			if c.Keys == nil {
				dst = append(dst, "null"...)
			} else {
				dst = append(dst, '[')
				for j, k := range c.Keys {
					if j > 0 {
						dst = append(dst, ',')
					}
					dst = appendJSONString(dst, k)
				}
				dst = append(dst, ']')
			}
			dst = append(dst, `,"label":`...)
			dst = appendJSONString(dst, c.Label)
			dst = appendIntField(dst, `,"bit":`, int64(c.Bit))
			dst = append(dst, '}')
		}
		dst = append(dst, ']')
	}
	if m.Bots {
		dst = append(dst, `,"bots":true`...)
	}
	return append(dst, '}')
}

// AppendResultJSON appends the JSON encoding of r to dst.
func AppendResultJSON(dst []byte, r abi.Result) []byte {
	dst = append(dst, `{"ended":`...)
	dst = strconv.AppendBool(dst, r.Ended)
	dst = appendIntField(dst, `,"ticks":`, r.Ticks)
	dst = appendIntField(dst, `,"winner":`, int64(r.Winner))
	dst = append(dst, `,"players":`...)
	if r.Players == nil {
		return append(dst, "null}"...)
	}
	dst = append(dst, '[')
	for i, p := range r.Players {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendIntField(dst, `{"slot":`, int64(p.Slot))
		dst = append(dst, `,"name":`...)
		dst = appendJSONString(dst, p.Name)
		dst = appendIntField(dst, `,"score":`, p.Score)
		if p.Kills != 0 {
			dst = appendIntField(dst, `,"kills":`, p.Kills)
		}
		if p.Deaths != 0 {
			dst = appendIntField(dst, `,"deaths":`, p.Deaths)
		}
		dst = append(dst, '}')
	}
	return append(dst, "]}"...)
}

func appendIntField(dst []byte, name string, v int64) []byte {
	return strconv.AppendInt(append(dst, name...), v, 10)
}

const hexDigits = "0123456789abcdef"

// appendJSONString quotes s exactly like encoding/json: HTML-sensitive
// characters, U+2028 and U+2029 are escaped and invalid UTF-8 becomes U+FFFD.
func appendJSONString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				dst = append(dst, '\\', c)
			case c == '\n':
				dst = append(dst, '\\', 'n')
			case c == '\r':
				dst = append(dst, '\\', 'r')
			case c == '\t':
				dst = append(dst, '\\', 't')
			case c == '\b':
				dst = append(dst, '\\', 'b')
			case c == '\f':
				dst = append(dst, '\\', 'f')
			case c < 0x20 || c == '<' || c == '>' || c == '&':
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			default:
				dst = append(dst, c)
			}
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			dst = append(dst, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
		default:
			dst = append(dst, s[i:i+n]...)
		}
		i += n
	}
	return append(dst, '"')
}
