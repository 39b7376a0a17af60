package engine

import (
	"bytes"
	"fmt"
	"strings"
	"sync"

	"ludus.dev/ludus/internal/utf8cut"
)

// What a guest writes to stdout and stderr (docs/ABI.md, "Errors and output").
// Every instance keeps three things of it: the whole output up to a cap
// (Output, for the node's log when a match fails), the complete lines with the
// tick they were written at (handed to the instance's OutputSink: the match's
// guest log), and what stderr received during the current call, from which the
// host takes the module's own words when that call fails (TrapError.Message).

// Bounds of guest output.
const (
	// MaxLineBytes bounds one line handed to an OutputSink; a longer line is
	// cut there and marked with "…".
	MaxLineBytes = 1 << 10
	// MaxMessageBytes bounds the module's message in a TrapError.
	MaxMessageBytes = 512
	// maxCallStderr bounds the stderr kept for one call (the message is taken
	// from it): a Go panic's message comes first, its goroutine trace after.
	maxCallStderr = 8 << 10
	// maxOutput bounds Output.
	maxOutput = 64 << 10
	// MaxCallOutputBytes and MaxCallOutputLines bound the output one call
	// into the guest has read and split into lines; the rest of that call's
	// output is dropped unread (and counted). Reading is host time the call
	// deadline does not see: without a bound one fd_write of 16 MiB of
	// newlines kept a 100 ms call busy for seconds.
	MaxCallOutputBytes = 1 << 20
	MaxCallOutputLines = 1000
)

// OutputLine is one line a guest wrote.
type OutputLine struct {
	// Tick is the instance's tick when the line was written: the number of
	// ticks stepped before the call that wrote it (a line written while
	// stepping from tick 41 to 42 has tick 41, like a trap in that step).
	Tick int64
	// Stderr tells stderr from stdout.
	Stderr bool
	// Text is the line without its newline, valid UTF-8, at most MaxLineBytes.
	Text string
}

// OutputSink receives an instance's output lines, from the goroutine calling
// into the instance. It must not block for long or call into the instance.
type OutputSink func(OutputLine)

// guestOutput is an instance's stdout and stderr.
type guestOutput struct {
	mu   sync.Mutex
	tick func() int64
	sink OutputSink
	// partial holds an unfinished line of each stream (0 stdout, 1 stderr),
	// and cut whether it already overflowed MaxLineBytes.
	partial [2][]byte
	cut     [2]bool
	// call is what stderr received during the current call (capped).
	call []byte
	all  cappedLog
	// callBytes and callLines are what the current call's output used of
	// its budget; callDropped counts the bytes dropped past it.
	callBytes, callLines, callDropped int
}

func newGuestOutput(tick func() int64) *guestOutput {
	return &guestOutput{tick: tick, all: cappedLog{max: maxOutput}}
}

// stream is one of the guest's file descriptors, as an io.Writer.
type stream struct {
	o      *guestOutput
	stderr bool
}

func (s stream) Write(p []byte) (int, error) { return s.o.write(p, s.stderr) }

func (o *guestOutput) write(p []byte, stderr bool) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := len(p)
	if room := MaxCallOutputBytes - o.callBytes; len(p) > room || o.callLines >= MaxCallOutputLines {
		if o.callLines >= MaxCallOutputLines {
			room = 0
		}
		room = max(room, 0)
		o.callDropped += len(p) - room
		o.all.dropped += len(p) - room
		p = p[:room]
	}
	o.callBytes += len(p)
	o.all.write(p)
	k := 0
	if stderr {
		k = 1
		if room := maxCallStderr - len(o.call); room > 0 {
			o.call = append(o.call, p[:min(room, len(p))]...)
		}
	}
	rest := p
	for len(rest) > 0 {
		i := bytes.IndexByte(rest, '\n')
		seg := rest
		if i >= 0 {
			seg = rest[:i]
		}
		room := max(MaxLineBytes-len(o.partial[k]), 0)
		if len(seg) > room {
			seg, o.cut[k] = seg[:room], true
		}
		o.partial[k] = append(o.partial[k], seg...)
		if i < 0 {
			break
		}
		o.emit(k)
		rest = rest[i+1:]
		if o.callLines++; o.callLines >= MaxCallOutputLines && len(rest) > 0 {
			o.callDropped += len(rest)
			o.all.dropped += len(rest)
			break
		}
	}
	return n, nil
}

// emit hands stream k's pending line to the sink. Called with mu held.
func (o *guestOutput) emit(k int) {
	text := cleanText(string(bytes.TrimSuffix(o.partial[k], []byte("\r"))), MaxLineBytes)
	if o.cut[k] && !strings.HasSuffix(text, "…") {
		text = utf8cut.Cut(text, MaxLineBytes-len("…")) + "…"
	}
	o.partial[k], o.cut[k] = o.partial[k][:0], false
	if o.sink != nil {
		o.sink(OutputLine{Tick: o.tick(), Stderr: k == 1, Text: text})
	}
}

// beginCall forgets the previous call's stderr and output budget.
func (o *guestOutput) beginCall() {
	o.mu.Lock()
	o.call = o.call[:0]
	o.callBytes, o.callLines, o.callDropped = 0, 0, 0
	o.mu.Unlock()
}

// endCall hands unfinished lines to the sink: a call's output ends a line.
// Output dropped past the call's budget is said in one more line.
func (o *guestOutput) endCall() {
	o.mu.Lock()
	defer o.mu.Unlock()
	for k := range o.partial {
		if len(o.partial[k]) > 0 {
			o.emit(k)
		}
	}
	if o.callDropped > 0 && o.sink != nil {
		o.sink(OutputLine{Tick: o.tick(), Stderr: true, Text: fmt.Sprintf(
			"[ludus: %d bytes of this call's output dropped: one call keeps at most %d lines and %d KiB]",
			o.callDropped, MaxCallOutputLines, MaxCallOutputBytes>>10)})
	}
}

// message returns the module's message about the current call's failure.
func (o *guestOutput) message() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return GuestMessage(string(o.call))
}

func (o *guestOutput) setSink(s OutputSink) {
	o.mu.Lock()
	o.sink = s
	o.mu.Unlock()
}

// GuestMessage extracts a module's own words about a failure from what it
// wrote to stderr during the failing call (docs/ABI.md, "Errors and output"):
// the message of a Go panic ("panic: MSG", without " [recovered]") or a Go
// runtime fatal error ("fatal error: MSG"); otherwise the text of the last
// line starting with "error: "; otherwise the last non-empty line. The result
// is valid UTF-8 without control characters, at most MaxMessageBytes; empty
// when the module wrote nothing.
func GuestMessage(stderr string) string {
	lines := strings.Split(stderr, "\n")
	for _, l := range lines {
		l = strings.TrimRight(l, "\r")
		if m, ok := strings.CutPrefix(l, "panic: "); ok {
			return cleanText(strings.TrimSuffix(m, " [recovered]"), MaxMessageBytes)
		}
		if strings.HasPrefix(l, "fatal error: ") {
			return cleanText(l, MaxMessageBytes)
		}
	}
	last := ""
	for i := len(lines) - 1; i >= 0; i-- {
		l := strings.TrimSpace(lines[i])
		if m, ok := strings.CutPrefix(l, "error: "); ok {
			return cleanText(m, MaxMessageBytes)
		}
		if last == "" && l != "" {
			last = l
		}
	}
	return cleanText(last, MaxMessageBytes)
}

// cleanText makes guest text printable: valid UTF-8, control characters
// (tabs aside) replaced, at most max bytes.
func cleanText(s string, max int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	s = strings.Map(func(r rune) rune {
		if r == '\t' {
			return ' '
		}
		if r < 0x20 || r == 0x7f {
			return '\uFFFD'
		}
		return r
	}, s)
	if len(s) > max {
		s = utf8cut.Cut(s, max-len("…")) + "…"
	}
	return s
}

// errLine is the first line of an error's text (wazero appends a wasm stack
// trace to a trap's).
func errLine(err error) string {
	s := err.Error()
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return s
}

// cappedLog keeps the first max bytes a guest prints; the rest is counted, not kept,
// so a chatty or hostile module cannot grow host memory. Its owner locks.
type cappedLog struct {
	max     int
	buf     []byte
	dropped int
}

func (l *cappedLog) write(p []byte) {
	room := min(max(l.max-len(l.buf), 0), len(p))
	l.buf = append(l.buf, p[:room]...)
	l.dropped += len(p) - room
}

func (l *cappedLog) String() string {
	if l.dropped > 0 {
		return fmt.Sprintf("%s\n[%d bytes dropped]", l.buf, l.dropped)
	}
	return string(l.buf)
}

func (o *guestOutput) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.all.String()
}
