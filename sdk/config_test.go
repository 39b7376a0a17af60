package sdk

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestConfigFields(t *testing.T) {
	type kv struct{ k, v string }
	for _, c := range []struct {
		in   string
		want []kv
		err  bool
	}{
		{"", nil, false},
		{" \n\t", nil, false},
		{"null", nil, false},
		{" null ", nil, false},
		{"{}", nil, false},
		{`{"a":1, "b" : [1,{"c":null}] ,"\u0062\ud83c\udfae":"x\"y"}`, []kv{{"a", "1"}, {"b", `[1,{"c":null}]`}, {"b🎮", `"x\"y"`}}, false},
		{`{"n":-0.5e+10,"t":true,"f":false}`, []kv{{"n", "-0.5e+10"}, {"t", "true"}, {"f", "false"}}, false},
		{`{"a":1,}`, nil, true},
		{`{"a":01}`, nil, true},
		{`{"a":1.}`, nil, true},
		{`{"a":.5}`, nil, true},
		{`{"a":"\x"}`, nil, true},
		{"{\"a\":\"\x01\"}", nil, true},
		{`{"a":tru}`, nil, true},
		{`{"a":1}}`, nil, true},
		{`{"a" 1}`, nil, true},
		{`{a:1}`, nil, true},
		{`[1]`, nil, true},
		{`3`, nil, true},
		{`nul`, nil, true},
		{`{"a":` + strings.Repeat("[", 300) + strings.Repeat("]", 300) + `}`, nil, true},
	} {
		var got []kv
		err := ConfigFields([]byte(c.in), func(k string, v JSONValue) error {
			got = append(got, kv{k, string(v)})
			return nil
		})
		if (err != nil) != c.err {
			t.Errorf("ConfigFields(%q) error = %v, want error %v", c.in, err, c.err)
			continue
		}
		if !c.err && !slices.Equal(got, c.want) {
			t.Errorf("ConfigFields(%q) = %q, want %q", c.in, got, c.want)
		}
	}
	stop := errors.New("stop")
	if err := ConfigFields([]byte(`{"a":1,"b":2}`), func(string, JSONValue) error { return stop }); err != stop {
		t.Errorf("callback error not returned: %v", err)
	}
}

func TestJSONValue(t *testing.T) {
	if n, err := JSONValue("-42").Int(); n != -42 || err != nil {
		t.Error("Int(-42)")
	}
	for _, bad := range []string{"4.0", "1e3", `"4"`, "true", "99999999999999999999"} {
		if _, err := JSONValue(bad).Int(); err == nil {
			t.Errorf("Int(%s) accepted", bad)
		}
	}
	if b, err := JSONValue("true").Bool(); !b || err != nil {
		t.Error("Bool(true)")
	}
	if _, err := JSONValue("1").Bool(); err == nil {
		t.Error("Bool(1) accepted")
	}
	if s, err := JSONValue(`"a\n\u00e9\ud800"`).Str(); s != "a\né\ufffd" || err != nil {
		t.Errorf("Str = %q, %v", s, err)
	}
	if _, err := JSONValue("1").Str(); err == nil {
		t.Error("Str(1) accepted")
	}
	if !JSONValue("null").IsNull() || JSONValue("0").IsNull() {
		t.Error("IsNull")
	}
}

// FuzzConfigFields checks ConfigFields against encoding/json: it accepts
// exactly the valid JSON objects (and null/empty), and it sees the same keys
// and string values.
func FuzzConfigFields(f *testing.F) {
	for _, s := range []string{`{"bots":3}`, `{"a":[1,2,{"b":"\u00e9"}],"c":null}`, `{"\ud800":"\udc00x"}`, `nul`, `{"a":1e}`, "{\"\xff\":1}"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var keys []string
		strs := map[string]string{} // last string value per key, as encoding/json keeps
		err := ConfigFields(b, func(k string, v JSONValue) error {
			keys = append(keys, k)
			delete(strs, k)
			if s, err := v.Str(); err == nil {
				strs[k] = s
			}
			return nil
		})
		var m map[string]json.RawMessage
		jerr := json.Unmarshal(b, &m)
		switch {
		case strings.Trim(string(b), " \t\r\n") == "": // JSON white space only
			if err != nil {
				t.Fatalf("empty input rejected: %v", err)
			}
		case jerr == nil && err != nil:
			if !strings.Contains(err.Error(), "nested too deeply") {
				t.Fatalf("valid object %q rejected: %v", b, err)
			}
		case jerr != nil && err == nil:
			t.Fatalf("%q accepted, encoding/json says %v", b, jerr)
		case err == nil:
			for _, k := range keys {
				if _, ok := m[k]; !ok {
					t.Fatalf("key %q not seen by encoding/json (%v)", k, m)
				}
			}
			if len(m) > len(keys) {
				t.Fatalf("encoding/json sees more keys: %v vs %q", m, keys)
			}
			for k, s := range strs {
				var want string
				if err := json.Unmarshal(m[k], &want); err != nil || s != want {
					t.Fatalf("key %q: Str() = %q, encoding/json %q (%v)", k, s, want, err)
				}
			}
		}
	})
}
