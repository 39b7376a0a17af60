package matchmaker

import (
	"encoding/json"
	"strconv"

	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
)

// outcome is a search's result as stored in etcd for the player's stream.
//
// It is stored as JSON, and stays JSON: a replica that is not upgraded yet
// reads its players' results with encoding/json, and a result it cannot
// read loses the match for them. encoding/json's reflection was the
// largest single cost of a stream's wait for its result, though (about 3 %
// of all CPU in the saturation profile of ludus bench matchmaking), so
// encode writes json.Marshal's bytes by hand and decodeOutcome reads
// JSON of that shape without reflection; anything else (an escape, other
// spacing or key order, a value written by another version) goes to
// encoding/json as before. TestOutcomeEncodingIsJSON and FuzzDecodeOutcome
// hold both to encoding/json's behaviour.
type outcome struct {
	Ticket    string     `json:"ticket"`
	Found     *foundSeat `json:"found,omitempty"`
	TimedOut  string     `json:"timed_out,omitempty"`
	Cancelled string     `json:"cancelled,omitempty"`
}

type foundSeat struct {
	GameID    string   `json:"game"`
	Region    string   `json:"region"`
	Gateway   string   `json:"gateway,omitempty"`
	Team      int      `json:"team"`
	Slot      int      `json:"slot"`
	Teammates []string `json:"teammates,omitempty"`
}

func (o outcome) response() *ludusv1.FindMatchResponse {
	switch {
	case o.Found != nil:
		f := o.Found
		return &ludusv1.FindMatchResponse{Msg: &ludusv1.FindMatchResponse_Found{Found: &ludusv1.MatchFound{
			GameId: f.GameID, Region: f.Region, Gateway: f.Gateway, Team: int32(f.Team), Slot: int32(f.Slot), Teammates: f.Teammates,
		}}}
	case o.TimedOut != "":
		return &ludusv1.FindMatchResponse{Msg: &ludusv1.FindMatchResponse_TimedOut{TimedOut: &ludusv1.MatchTimedOut{Reason: o.TimedOut}}}
	default:
		return cancelled(o.Cancelled)
	}
}

// plainJSON reports whether json.Marshal writes s as it is between quotes:
// printable ASCII without the characters it escapes (the quote, the
// backslash, and <, > and & for HTML).
func plainJSON(s string) bool {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c < 0x20 || c >= 0x7f, c == '"', c == '\\', c == '<', c == '>', c == '&':
			return false
		}
	}
	return true
}

func (o outcome) plain() bool {
	if !plainJSON(o.Ticket) || !plainJSON(o.TimedOut) || !plainJSON(o.Cancelled) {
		return false
	}
	if f := o.Found; f != nil {
		if !plainJSON(f.GameID) || !plainJSON(f.Region) || !plainJSON(f.Gateway) {
			return false
		}
		for _, m := range f.Teammates {
			if !plainJSON(m) {
				return false
			}
		}
	}
	return true
}

// encode returns json.Marshal(o).
func (o outcome) encode() []byte {
	if !o.plain() {
		b, _ := json.Marshal(o) // cannot fail: strings, ints and a slice of strings
		return b
	}
	b := make([]byte, 0, 160)
	b = appendField(append(b, '{'), "ticket", o.Ticket)
	if f := o.Found; f != nil {
		b = append(b, `,"found":{`...)
		b = appendField(b, "game", f.GameID)
		b = appendField(append(b, ','), "region", f.Region)
		if f.Gateway != "" {
			b = appendField(append(b, ','), "gateway", f.Gateway)
		}
		b = strconv.AppendInt(append(b, `,"team":`...), int64(f.Team), 10)
		b = strconv.AppendInt(append(b, `,"slot":`...), int64(f.Slot), 10)
		if len(f.Teammates) > 0 {
			b = append(b, `,"teammates":[`...)
			for i, m := range f.Teammates {
				if i > 0 {
					b = append(b, ',')
				}
				b = append(append(append(b, '"'), m...), '"')
			}
			b = append(b, ']')
		}
		b = append(b, '}')
	}
	if o.TimedOut != "" {
		b = appendField(append(b, ','), "timed_out", o.TimedOut)
	}
	if o.Cancelled != "" {
		b = appendField(append(b, ','), "cancelled", o.Cancelled)
	}
	return append(b, '}')
}

// appendField appends "name":"value" for a plain value.
func appendField(b []byte, name, value string) []byte {
	b = append(append(append(b, '"'), name...), `":"`...)
	return append(append(b, value...), '"')
}

// decodeOutcome decodes a stored outcome as json.Unmarshal does.
func decodeOutcome(b []byte) (outcome, error) {
	if o, ok := parseOutcome(b); ok {
		return o, nil
	}
	var o outcome
	err := json.Unmarshal(b, &o)
	return o, err
}

// parseOutcome reads the bytes encode writes for a plain outcome; ok is
// false for anything else.
func parseOutcome(b []byte) (o outcome, ok bool) {
	p := outcomeParser{b: b, ok: true}
	p.lit(`{"ticket":`)
	o.Ticket = p.str()
	if p.opt(`,"found":{"game":`) {
		f := &foundSeat{GameID: p.str()}
		p.lit(`,"region":`)
		f.Region = p.str()
		if p.opt(`,"gateway":`) {
			f.Gateway = p.str()
		}
		p.lit(`,"team":`)
		f.Team = p.int()
		p.lit(`,"slot":`)
		f.Slot = p.int()
		if p.opt(`,"teammates":[`) {
			f.Teammates = append(f.Teammates, p.str())
			for p.opt(",") {
				f.Teammates = append(f.Teammates, p.str())
			}
			p.lit("]")
		}
		p.lit("}")
		o.Found = f
	}
	if p.opt(`,"timed_out":`) {
		o.TimedOut = p.str()
	}
	if p.opt(`,"cancelled":`) {
		o.Cancelled = p.str()
	}
	p.lit("}")
	return o, p.ok && len(p.b) == 0
}

// outcomeParser reads JSON of one fixed shape; ok turns false, and stays
// false, at the first byte that does not fit it.
type outcomeParser struct {
	b  []byte
	ok bool
}

// opt consumes s if the input goes on with it.
func (p *outcomeParser) opt(s string) bool {
	if !p.ok || len(p.b) < len(s) || string(p.b[:len(s)]) != s {
		return false
	}
	p.b = p.b[len(s):]
	return true
}

// lit consumes s, which must come next.
func (p *outcomeParser) lit(s string) {
	if !p.opt(s) {
		p.ok = false
	}
}

// str reads a quoted string of printable ASCII without escapes, whose
// bytes are what json.Unmarshal would decode.
func (p *outcomeParser) str() string {
	if !p.ok || len(p.b) == 0 || p.b[0] != '"' {
		p.ok = false
		return ""
	}
	for i := 1; i < len(p.b); i++ {
		switch c := p.b[i]; {
		case c == '"':
			s := string(p.b[1:i])
			p.b = p.b[i+1:]
			return s
		case c < 0x20 || c >= 0x7f || c == '\\':
			p.ok = false
			return ""
		}
	}
	p.ok = false
	return ""
}

// int reads an integer as json.Marshal writes an int: an optional minus,
// then digits without a leading zero; at most 18 of them, so it cannot
// overflow.
func (p *outcomeParser) int() int {
	if !p.ok {
		return 0
	}
	neg := len(p.b) > 0 && p.b[0] == '-'
	i := 0
	if neg {
		i = 1
	}
	start := i
	n := 0
	for i < len(p.b) && p.b[i] >= '0' && p.b[i] <= '9' && i-start < 18 {
		n = n*10 + int(p.b[i]-'0')
		i++
	}
	digits := i - start
	if digits == 0 || (digits > 1 && p.b[start] == '0') || (i < len(p.b) && p.b[i] >= '0' && p.b[i] <= '9') {
		p.ok = false
		return 0
	}
	p.b = p.b[i:]
	if neg {
		return -n
	}
	return n
}
