package harness

import (
	"fmt"
	"time"
)

// Clock maps trace time onto wall time: Speed trace seconds pass per wall
// second, counted from the moment the clock was made. Objects written to the
// API keep wall-clock timestamps; only waits are scaled.
type Clock struct {
	origin time.Time
	speed  float64
}

// NewClock starts a clock running speed times faster than real time.
func NewClock(speed float64) (*Clock, error) {
	if !(speed > 0) || speed > 1e6 {
		return nil, fmt.Errorf("speed factor %v: want a number in (0, 1e6]", speed)
	}
	return &Clock{origin: time.Now(), speed: speed}, nil
}

// Speed is the number of trace seconds per wall second.
func (c *Clock) Speed() float64 { return c.speed }

// Elapsed is the trace time since the clock started.
func (c *Clock) Elapsed() time.Duration {
	return time.Duration(float64(time.Since(c.origin)) * c.speed)
}

// Wall converts a trace duration into the wall duration it takes.
func (c *Clock) Wall(d time.Duration) time.Duration {
	return time.Duration(float64(d) / c.speed)
}

// WallAt is the wall time at which trace time t (since start) is reached.
func (c *Clock) WallAt(t time.Duration) time.Time { return c.origin.Add(c.Wall(t)) }
