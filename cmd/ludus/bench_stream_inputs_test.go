package main

import (
	"testing"
	"time"
)

func TestBestSustainedPlayRate(t *testing.T) {
	ok := func(rate float64) playStep {
		return playStep{rate: rate, held: 4 * time.Second, sent: int(rate * 4), p50: 40, p99: 120}
	}
	slow := ok(120)
	slow.p99 = 501
	lost := ok(90)
	lost.unacked = 1
	short := ok(60)
	short.sent = int(0.8 * 60 * 4) // the client could not send the rate
	for _, c := range []struct {
		name  string
		steps []playStep
		want  float64
	}{
		{"all sustained", []playStep{ok(30), ok(60), ok(90), ok(120), ok(180)}, 180},
		{"p99 over 500 ms at 120", []playStep{ok(30), ok(60), ok(90), slow}, 90},
		{"an input never acked at 90", []playStep{ok(30), ok(60), lost}, 60},
		{"rate not sent at 60", []playStep{ok(30), short, ok(90)}, 30},
		{"first step fails", []playStep{slow, ok(60)}, 0},
		{"none", nil, 0},
	} {
		if got := bestSustained(c.steps); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

func TestParseDelivery(t *testing.T) {
	for _, m := range []string{"snapshots", "pixels"} {
		if _, err := parseDelivery(m); err != nil {
			t.Errorf("%s: %v", m, err)
		}
	}
	if _, err := parseDelivery("frames"); err == nil {
		t.Error("an unknown mode was accepted")
	}
}
