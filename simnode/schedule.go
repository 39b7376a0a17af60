package simnode

import "time"

// tickSchedule is a game's drift-free tick schedule: tick n of the run is due
// at start + (n - startTick + 1) periods, so a late tick does not shift every
// later one. A game that fell more than maxLag behind (a stalled machine)
// starts a new schedule at now instead of stepping a burst to catch up.
type tickSchedule struct {
	start     time.Time
	startTick int64
	period    time.Duration
	maxLag    time.Duration
}

// next returns when the tick after tick is due and how long to wait for it
// at now (never negative), restarting the schedule when far behind.
func (s *tickSchedule) next(tick int64, now time.Time) (due time.Time, wait time.Duration) {
	due = s.start.Add(time.Duration(tick-s.startTick+1) * s.period)
	wait = due.Sub(now)
	if wait < -s.maxLag {
		s.start, s.startTick = now, tick
		return now.Add(s.period), s.period
	}
	return due, max(wait, 0)
}
