package scripts

import (
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v4"
)

// composeConfig is the part of `docker-compose config`'s resolved
// configuration the tests read.
type composeConfig struct {
	Services map[string]struct {
		Image       string         `yaml:"image"`
		Build       map[string]any `yaml:"build"`
		PullPolicy  string         `yaml:"pull_policy"`
		Profiles    []string       `yaml:"profiles"`
		Volumes     []string       `yaml:"volumes"`
		Restart     string         `yaml:"restart"`
		Healthcheck struct {
			StartPeriod string `yaml:"start_period"`
		} `yaml:"healthcheck"`
	} `yaml:"services"`
	Volumes map[string]any `yaml:"volumes"`
}

// resolvedCompose returns docker-compose.yml as docker-compose resolves it
// (Debian's docker-compose, which make test installs; no engine needed).
func resolvedCompose(t *testing.T) composeConfig {
	t.Helper()
	if _, err := exec.LookPath("docker-compose"); err != nil {
		t.Fatal("docker-compose is not installed: make test installs it (scripts/deps.sh), or apt-get install docker-compose")
	}
	cmd := exec.Command("docker-compose", "config")
	cmd.Dir = ".."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("docker-compose config: %v", err)
	}
	var c composeConfig
	if err := yaml.Unmarshal(out, &c); err != nil {
		t.Fatalf("docker-compose config's output: %v", err)
	}
	if len(c.Services) < 4 {
		t.Fatalf("docker-compose config names %d services, want the demo's four at least", len(c.Services))
	}
	return c
}

// The first `docker compose up` tries to pull nothing it builds itself:
// every service of the image the file builds either builds it or may not
// pull it, so no "pull access denied" line is printed before the build.
func TestComposePullsNothingItBuilds(t *testing.T) {
	t.Parallel()
	c := resolvedCompose(t)
	built := map[string]bool{}
	for _, s := range c.Services {
		if s.Build != nil {
			built[s.Image] = true
		}
	}
	if len(built) == 0 {
		t.Fatal("no service builds an image")
	}
	for name, s := range c.Services {
		if built[s.Image] && s.Build == nil && s.PullPolicy != "never" {
			t.Errorf("service %s uses the image %s that compose builds, without building it and with pull_policy %q: compose tries to pull it first (want pull_policy: never)", name, s.Image, s.PullPolicy)
		}
	}
}

// A compose that does not run a profile creates nothing for it: no named
// volume is used only by services of a profile.
func TestComposeUnusedProfilesCreateNothing(t *testing.T) {
	t.Parallel()
	c := resolvedCompose(t)
	usedWithout := map[string]bool{}
	for _, s := range c.Services {
		for _, v := range s.Volumes {
			src, _, _ := strings.Cut(v, ":")
			if len(s.Profiles) == 0 {
				usedWithout[src] = true
			}
		}
	}
	for name := range c.Volumes {
		if !usedWithout[name] {
			t.Errorf("the named volume %s is used only by services of a profile: docker-compose 1.29 creates it for every up", name)
		}
	}
}

// The demo's database gets a start period for its first initialisation,
// and every file the demo mounts from the checkout is labelled for
// containers on an SELinux host (z).
func TestComposeStartsOnSlowAndSELinuxHosts(t *testing.T) {
	t.Parallel()
	c := resolvedCompose(t)
	if p := c.Services["postgres"].Healthcheck.StartPeriod; !atLeast(p, 30*time.Second) {
		t.Errorf("postgres's healthcheck has a start_period of %q, want 30s or more: a slow first initialisation counts failed checks", p)
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	for name, s := range c.Services {
		for _, v := range s.Volumes {
			parts := strings.Split(v, ":")
			if !strings.HasPrefix(parts[0], root) {
				continue // a volume, not a file of the checkout
			}
			opts := []string{}
			if len(parts) > 2 {
				opts = strings.Split(parts[2], ",")
			}
			if !slices.Contains(opts, "z") && !slices.Contains(opts, "Z") {
				t.Errorf("service %s mounts %s without the SELinux label option z", name, parts[0])
			}
		}
	}
	for _, name := range []string{"postgres", "nats", "pspsim", "api"} {
		if c.Services[name].Restart != "unless-stopped" {
			t.Errorf("service %s restarts %q, want unless-stopped (docs/DOCKER.md says what restarts)", name, c.Services[name].Restart)
		}
	}
}

// atLeast reports whether d, a duration as docker-compose prints it
// ("2m", "0h", "1m30s"), is at least min.
func atLeast(d string, min time.Duration) bool {
	v, err := time.ParseDuration(d)
	return err == nil && v >= min
}
