package retention

import (
	"context"
	"time"
)

// SetSleep replaces how s waits out a pause, so that a test records the
// pauses instead of taking them.
func SetSleep(s *Sweeper, sleep func(ctx context.Context, d time.Duration) error) { s.sleep = sleep }

// Pause is how long s rests after a full batch that took took.
func Pause(s *Sweeper, took time.Duration) time.Duration { return s.pause(took) }
