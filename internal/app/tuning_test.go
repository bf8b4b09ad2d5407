package app_test

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/app"
)

// writeTuning writes a tuning file and returns its path.
func writeTuning(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "tuning.json")
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// A tuning file overrides the fields it names and leaves the others at
// their defaults.
func TestLoadTuning(t *testing.T) {
	t.Parallel()
	got, err := app.LoadTuning(writeTuning(t, `{"OutboxLinger": "20ms", "OutboxAtomicMin": 0, "SweepDutyCycle": 0.5, "RecovererInterval": "0s"}`))
	if err != nil {
		t.Fatal(err)
	}
	want := app.DefaultTuning()
	want.OutboxLinger, want.OutboxAtomicMin, want.SweepDutyCycle, want.RecovererInterval = 20*time.Millisecond, 0, 0.5, 0
	if got != want {
		t.Fatalf("tuning = %+v, want %+v", got, want)
	}
	if got, err := app.LoadTuning(writeTuning(t, `{}`)); err != nil || got != app.DefaultTuning() {
		t.Fatalf("an empty tuning file: %+v, %v", got, err)
	}
}

// Every field of Tuning can be set from a file: a field of a kind the
// loader does not know would be refused as such.
func TestEveryTuningFieldLoads(t *testing.T) {
	t.Parallel()
	typ := reflect.TypeFor[app.Tuning]()
	for i := range typ.NumField() {
		f := typ.Field(i)
		value := "7"
		switch {
		case f.Type == reflect.TypeFor[time.Duration]():
			value = `"7ms"`
		case f.Type.Kind() == reflect.Float64:
			value = "0.7"
		case f.Type.Kind() == reflect.Bool:
			value = "true"
		}
		got, err := app.LoadTuning(writeTuning(t, `{"`+f.Name+`": `+value+`}`))
		if err != nil {
			t.Errorf("%s: %v", f.Name, err)
			continue
		}
		if reflect.ValueOf(got).Field(i).Equal(reflect.ValueOf(app.DefaultTuning()).Field(i)) {
			t.Errorf("%s: %s left the default", f.Name, value)
		}
	}
}

// A tuning file is strict: an unknown member (a typo, or a field's name in
// another case), a bad duration and a value of the wrong kind are each
// refused with one line that names the member; a value out of range is
// refused by Config.Check, which api serve runs before it starts.
func TestLoadTuningRefusesWhatItCannotUse(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		body string
		want []string // one line each
	}{
		{`{"OutboxLingr": "5ms"}`, []string{`unknown member "OutboxLingr"`}},
		{`{"outboxLinger": "5ms"}`, []string{`unknown member "outboxLinger"`}},
		{`{"OutboxLinger": "5 ms"}`, []string{`OutboxLinger: want a duration such as "250ms", "2s" or "1m30s", not "5 ms"`}},
		{`{"OutboxLinger": 5}`, []string{`OutboxLinger: want a duration`}},
		{`{"OutboxLinger": "-5ms"}`, []string{`OutboxLinger: want a duration`}},
		{`{"SweepBatch": "250"}`, []string{`SweepBatch: want an integer, not "250"`}},
		{`{"SweepBatch": 2.5}`, []string{`SweepBatch: want an integer`}},
		{`{"SweepDutyCycle": "half"}`, []string{`SweepDutyCycle: want a number`}},
		{`{"TrustTraceparent": "yes"}`, []string{`TrustTraceparent: want true or false, not "yes"`}},
		{`{"ReadTimeout": "1x", "Nope": 1}`, []string{`unknown member "Nope"`, `ReadTimeout: want a duration`}},
		{`["OutboxLinger"]`, []string{`want a JSON object whose members are fields of app.Tuning`}},
		{`{"OutboxLinger": "5ms"} {}`, []string{`want one JSON object, and nothing after it`}},
	} {
		path := writeTuning(t, tc.body)
		_, err := app.LoadTuning(path)
		if err == nil {
			t.Errorf("%s: accepted", tc.body)
			continue
		}
		lines := strings.Split(err.Error(), "\n")
		if len(lines) != len(tc.want) {
			t.Errorf("%s: %d lines, want %d: %v", tc.body, len(lines), len(tc.want), err)
			continue
		}
		for i, w := range tc.want {
			if !strings.HasPrefix(lines[i], "tuning file "+path+": ") && i == 0 || !strings.Contains(lines[i], w) {
				t.Errorf("%s: line %q, want it to say %q", tc.body, lines[i], w)
			}
		}
	}
	if _, err := app.LoadTuning(filepath.Join(t.TempDir(), "none.json")); err == nil || !strings.Contains(err.Error(), "tuning file: open ") {
		t.Errorf("a missing file: %v", err)
	}

	// Out of range: the file loads, the check refuses it by name.
	for body, want := range map[string]string{
		`{"OutboxLinger": "2s"}`:          "tuning OutboxLinger (2s) must be at most 1s",
		`{"LogFlushInterval": "5s"}`:      "tuning LogFlushInterval (5s) must be at most 1s",
		`{"OutboxAtomicMin": 1001}`:       "tuning OutboxAtomicMin (1001) must be from 0 to 1000",
		`{"SweepDutyCycle": 0}`:           "tuning SweepDutyCycle (0) must be more than 0 and at most 1",
		`{"SweepBatch": 0}`:               "tuning SweepBatch (0) must be from 1 to 100000",
		`{"MaxInFlight": -1}`:             "tuning MaxInFlight (-1) must be from 1 to 100000",
		`{"RecovererMaxAttempts": 0}`:     "tuning RecovererMaxAttempts (0) must be from 1 to 1000",
		`{"MaxConnections": 0}`:           "tuning MaxConnections (0) must be from 1 to 1000000",
		`{"WebhookMaxInFlight": 0}`:       "tuning WebhookMaxInFlight (0) must be from 1 to 100000",
		`{"TenantShare": 1.5}`:            "tuning TenantShare (1.5) must be more than 0 and at most 1",
		`{"ReclaimAfter": "5s"}`:          "tuning ReclaimAfter (5s) must be shorter than 5s",
		`{"StartupTimeout": "0s"}`:        "tuning StartupTimeout (0s) must be positive",
		`{"WebhookWorkerInterval": "0s"}`: "tuning WebhookWorkerInterval (0s) must be positive",
	} {
		tuning, err := app.LoadTuning(writeTuning(t, body))
		if err != nil {
			t.Fatalf("%s: %v", body, err)
		}
		c, err := app.ConfigFromEnv(func(k string) string { return map[string]string{"DATABASE_URL": "postgres://x"}[k] })
		if err != nil {
			t.Fatal(err)
		}
		c.Tuning = tuning
		if err := c.Check(); err == nil || !strings.HasPrefix(err.Error(), want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: Check = %v, want one line %q...", body, err, want)
		}
	}
}

// docs/CONFIGURATION.md is the one list of what a deployment sets and what
// can be tuned: its table names every variable ConfigFromEnv reads (at
// most 20, OpenTelemetry's standard variables aside), and its Tuning
// section every field of Tuning.
func TestConfigurationPageListsEverySetting(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../../docs/CONFIGURATION.md")
	if err != nil {
		t.Fatal(err)
	}
	page := string(doc)
	tuningAt := strings.Index(page, "\n## Tuning")
	if tuningAt < 0 {
		t.Fatal(`docs/CONFIGURATION.md has no "## Tuning" section`)
	}
	deployment, tuning := page[:tuningAt], page[tuningAt:]

	var read []string
	if _, err := app.ConfigFromEnv(func(name string) string {
		if !strings.HasPrefix(name, "OTEL_") && !slices.Contains(read, name) {
			read = append(read, name)
		}
		return ""
	}); err == nil {
		t.Fatal("ConfigFromEnv accepted an empty environment")
	}
	if len(read) > 20 {
		t.Errorf("ConfigFromEnv reads %d variables, at most 20 wanted: %v", len(read), read)
	}
	for _, name := range read {
		if !strings.Contains(deployment, "| `"+name+"` |") {
			t.Errorf("the deployment table of docs/CONFIGURATION.md has no row for %s", name)
		}
	}
	typ := reflect.TypeFor[app.Tuning]()
	for i := range typ.NumField() {
		if name := typ.Field(i).Name; !strings.Contains(tuning, "`"+name+"`") {
			t.Errorf("the Tuning section of docs/CONFIGURATION.md does not list %s", name)
		}
	}
}
