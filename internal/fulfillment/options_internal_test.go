package fulfillment

import (
	"log/slog"
	"testing"
	"time"
)

// Without options the consumer runs with the defaults the options name, and
// declares its durable consumer with them; a value that is not positive
// keeps its default, except a negative WithMaxDeliver, which sets no bound.
func TestConsumerDefaultsAndOptions(t *testing.T) {
	t.Parallel()
	defaults := config{ackWait: 30 * time.Second, maxDeliver: 10, maxAckPending: 1000, workers: 4, processTimeout: 10 * time.Second}
	for _, c := range []struct {
		name string
		opts []ConsumerOption
		want config
	}{
		{"no options", nil, defaults},
		{"not positive", []ConsumerOption{WithAckWait(0), WithMaxDeliver(0), WithMaxAckPending(-1), WithWorkers(0), WithProcessTimeout(-1)}, defaults},
		{"no delivery bound", []ConsumerOption{WithMaxDeliver(-1)}, config{ackWait: 30 * time.Second, maxDeliver: -1, maxAckPending: 1000, workers: 4, processTimeout: 10 * time.Second}},
		{"options", []ConsumerOption{WithAckWait(time.Second), WithMaxDeliver(3), WithMaxAckPending(5), WithWorkers(8), WithProcessTimeout(2 * time.Second)},
			config{ackWait: time.Second, maxDeliver: 3, maxAckPending: 5, workers: 8, processTimeout: 2 * time.Second}},
	} {
		cons := New(nil, nil, nil, slog.New(slog.DiscardHandler), time.Now, c.opts...)
		if cons.cfg != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, cons.cfg, c.want)
		}
		cc := cons.ConsumerConfig()
		if cc.AckWait != c.want.ackWait || cc.MaxDeliver != c.want.maxDeliver || cc.MaxAckPending != c.want.maxAckPending {
			t.Errorf("%s: declared with ack wait %v, max deliver %d, max ack pending %d; want %+v", c.name, cc.AckWait, cc.MaxDeliver, cc.MaxAckPending, c.want)
		}
	}
}
