package backend

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
)

func TestArchivedGuestLogKeepsTheNewestLines(t *testing.T) {
	if archivedGuestLog(nil) != nil || archivedGuestLog(&ludusv1.GuestLog{}) != nil {
		t.Fatal("an empty log is stored")
	}
	small := &ludusv1.GuestLog{Lines: []*ludusv1.GuestLogLine{{Seq: 1, Tick: 3, Text: "hello"}}, Dropped: 2}
	var got ludusv1.GuestLog
	if err := proto.Unmarshal(archivedGuestLog(small), &got); err != nil || !proto.Equal(&got, small) {
		t.Fatalf("round trip: %v, %v", &got, err)
	}
	// 2,000 lines of 1 KiB: more than the archive keeps.
	big := &ludusv1.GuestLog{}
	for i := 1; i <= 2000; i++ {
		big.Lines = append(big.Lines, &ludusv1.GuestLogLine{Seq: uint64(i), Tick: int64(i), Text: strings.Repeat("x", 1000)})
	}
	b := archivedGuestLog(big)
	if len(b) == 0 || len(b) > MaxArchivedGuestLogBytes {
		t.Fatalf("kept %d bytes; the bound is %d", len(b), MaxArchivedGuestLogBytes)
	}
	got.Reset()
	if err := proto.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	n := len(got.Lines)
	if n == 0 || got.Lines[n-1].Seq != 2000 || got.Dropped != uint64(2000-n) {
		t.Fatalf("kept %d lines ending at seq %d with %d dropped; want the newest, the rest counted", n, got.Lines[n-1].Seq, got.Dropped)
	}
}
