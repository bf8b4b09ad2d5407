package chaos

import (
	"context"
	"errors"
	"testing"
	"time"
)

// A JetStream API request that goes unanswered is asked again, instead of
// holding the run until its deadline.
func TestAnUnansweredStreamRequestIsAskedAgain(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tries := 0
	err := jsRequest(ctx, 50*time.Millisecond, func(try context.Context) error {
		tries++
		if tries == 1 {
			<-try.Done() // the answer never comes
			return try.Err()
		}
		return nil
	})
	if err != nil || tries != 2 {
		t.Fatalf("jsRequest = %v after %d tries, want nil after 2", err, tries)
	}
	if ctx.Err() != nil {
		t.Fatal("the first try held the request until the run's deadline")
	}

	// Any other error is the answer.
	other := errors.New("stream not found")
	tries = 0
	if err := jsRequest(ctx, 50*time.Millisecond, func(context.Context) error { tries++; return other }); !errors.Is(err, other) || tries != 1 {
		t.Fatalf("jsRequest = %v after %d tries, want the error after 1", err, tries)
	}
}
