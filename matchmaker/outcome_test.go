package matchmaker

import (
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"testing"
)

// outcomeCases are outcomes of every shape, plain and not.
func outcomeCases() []outcome {
	seat := func(mates ...string) *foundSeat {
		return &foundSeat{GameID: "g-1", Region: "eu", Gateway: "https://eu.example:8443/x", Team: 1, Slot: 5, Teammates: mates}
	}
	return []outcome{
		{Ticket: "t1"},
		{Ticket: ""},
		{Ticket: "t1", Found: seat()},
		{Ticket: "t1", Found: seat("a")},
		{Ticket: "t1", Found: seat("a", "b", "c")},
		{Ticket: "t1", Found: seat([]string{}...)},
		{Ticket: "t1", Found: &foundSeat{}},
		{Ticket: "t1", Found: &foundSeat{GameID: "g", Region: "us", Team: -3, Slot: 1 << 40}},
		{Ticket: "t1", TimedOut: "no match within 45s; queue again or try another mode"},
		{Ticket: "t1", Cancelled: PartyLeft},
		{Ticket: "t1", Found: seat("a"), TimedOut: "x", Cancelled: "y"},
		// Not plain: encoding/json escapes these.
		{Ticket: "t1", Cancelled: `party "ABC" is <full> & closed`},
		{Ticket: "t\n1", Found: seat("é")},
		{Ticket: "t1", Found: &foundSeat{GameID: "g", Region: "r", Gateway: "https://x/?a=1&b=2"}},
		{Ticket: "t1", Cancelled: "\x7f"},
	}
}

func TestOutcomeEncodingIsJSON(t *testing.T) {
	check := func(o outcome) {
		t.Helper()
		want, err := json.Marshal(o)
		if err != nil {
			t.Fatal(err)
		}
		got := o.encode()
		if string(got) != string(want) {
			t.Fatalf("encode(%+v) = %s, json.Marshal = %s", o, got, want)
		}
		back, err := decodeOutcome(got)
		if err != nil {
			t.Fatalf("decodeOutcome(%s): %v", got, err)
		}
		var viaJSON outcome
		if err := json.Unmarshal(got, &viaJSON); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(back, viaJSON) {
			t.Fatalf("decodeOutcome(%s) = %+v, json.Unmarshal = %+v", got, back, viaJSON)
		}
	}
	for _, o := range outcomeCases() {
		check(o)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	alphabet := "abcXYZ019-_:/.;, \"\\<>&\x01\x7fé"
	word := func() string {
		b := make([]byte, rng.IntN(8))
		for i := range b {
			b[i] = alphabet[rng.IntN(len(alphabet))]
		}
		return string(b)
	}
	for range 5000 {
		o := outcome{Ticket: word()}
		if rng.IntN(2) == 0 {
			f := &foundSeat{GameID: word(), Region: word(), Gateway: word(), Team: rng.IntN(5) - 1, Slot: rng.IntN(1000)}
			for range rng.IntN(4) {
				f.Teammates = append(f.Teammates, word())
			}
			o.Found = f
		}
		if rng.IntN(3) == 0 {
			o.TimedOut = word()
		}
		if rng.IntN(3) == 0 {
			o.Cancelled = word()
		}
		check(o)
	}
}

// TestParseOutcomeTakesOnlyItsOwnShape: JSON that encode would not write
// (other spacing, order, escapes, numbers) is left to encoding/json, and
// still decodes.
func TestParseOutcomeTakesOnlyItsOwnShape(t *testing.T) {
	for _, in := range []string{
		`{"ticket": "t1"}`,
		`{"ticket":"t1","cancelled":"x","timed_out":"y"}`,
		`{"ticket":"t\u00311"}`,
		`{"ticket":"t1","found":{"game":"g","region":"r","team":01,"slot":2}}`,
		`{"ticket":"t1","found":{"game":"g","region":"r","team":1.0,"slot":2}}`,
		`{"ticket":"t1","found":{"game":"g","region":"r","team":1,"slot":2,"teammates":[]}}`,
		`{"ticket":"t1","found":{"game":"g","region":"r","team":1,"slot":2},"extra":1}`,
		`{"TICKET":"t1"}`,
		`{"ticket":"t1"} `,
		`{"ticket":"t1","found":{"game":"g","region":"r","team":1,"slot":2}`,
		`{"ticket":"t1","found":{"game":"g","region":"r","team":1234567890123456789,"slot":2}}`,
	} {
		if o, ok := parseOutcome([]byte(in)); ok {
			t.Errorf("parseOutcome(%s) took it: %+v", in, o)
		}
		var want outcome
		wantErr := json.Unmarshal([]byte(in), &want)
		got, err := decodeOutcome([]byte(in))
		if (err != nil) != (wantErr != nil) || (err == nil && !reflect.DeepEqual(got, want)) {
			t.Errorf("decodeOutcome(%s) = %+v, %v; json.Unmarshal: %+v, %v", in, got, err, want, wantErr)
		}
	}
}

// FuzzDecodeOutcome: whatever parseOutcome takes, encoding/json decodes
// alike; whatever it leaves, decodeOutcome decodes as encoding/json does.
func FuzzDecodeOutcome(f *testing.F) {
	for _, o := range outcomeCases() {
		f.Add(o.encode())
	}
	f.Add([]byte(`{"ticket":"t1","found":{"game":"g","region":"r","team":-0,"slot":2}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		o, ok := parseOutcome(b)
		var want outcome
		wantErr := json.Unmarshal(b, &want)
		if !ok {
			got, err := decodeOutcome(b)
			if (err != nil) != (wantErr != nil) || (err == nil && !reflect.DeepEqual(got, want)) {
				t.Fatalf("decodeOutcome(%q) = %+v, %v; json.Unmarshal: %+v, %v", b, got, err, want, wantErr)
			}
			return
		}
		if wantErr != nil {
			t.Fatalf("parseOutcome took %q, which json.Unmarshal refuses: %v", b, wantErr)
		}
		if !reflect.DeepEqual(o, want) {
			t.Fatalf("parseOutcome(%q) = %+v, json.Unmarshal = %+v", b, o, want)
		}
	})
}
