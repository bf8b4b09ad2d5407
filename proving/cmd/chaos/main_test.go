package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"strings"
	"testing"
)

func TestRunHelpAndUsageErrors(t *testing.T) {
	t.Parallel()
	noEnv := func(string) string { return "" }
	var out bytes.Buffer
	if err := run(context.Background(), []string{"--help"}, noEnv, &out); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("--help: %v", err)
	}
	for _, f := range []string{"-intents", "-seed", "-crash-every", "-lease", "-client-attempts", "-outbox", "-db-faults", "-cluster"} {
		if !strings.Contains(out.String(), f) {
			t.Errorf("--help does not list %s:\n%s", f, out.String())
		}
	}
	if err := run(context.Background(), []string{"--db-faults=false"}, noEnv, &out); err == nil || !strings.Contains(err.Error(), "DATABASE_URL") {
		t.Errorf("without database faults and without DATABASE_URL: %v", err)
	}
	if err := run(context.Background(), []string{"extra"}, noEnv, &out); err == nil || !strings.Contains(err.Error(), "unexpected argument") {
		t.Errorf("with an argument: %v", err)
	}
	for _, args := range [][]string{{"--cluster", "--db-faults"}, {"--cluster", "--net-faults=true"}} {
		if err := run(context.Background(), args, noEnv, &out); err == nil || !strings.Contains(err.Error(), "--cluster takes neither") {
			t.Errorf("%v: %v", args, err)
		}
	}
	withDB := func(k string) string { return map[string]string{"DATABASE_URL": "postgres://x"}[k] }
	if err := run(context.Background(), []string{"--lease", "5s"}, withDB, &out); err == nil || !strings.Contains(err.Error(), "must be longer than the APIs' WRITE_TIMEOUT") {
		t.Errorf("a lease the APIs refuse: %v", err)
	}
}

func TestCrashes(t *testing.T) {
	t.Parallel()
	for in, want := range map[int]int{0: -1, -5: -1, 400: 400} {
		if got := crashes(in); got != want {
			t.Errorf("crashes(%d) = %d, want %d", in, got, want)
		}
	}
}
