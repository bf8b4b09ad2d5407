// Command vulnpolicy applies the project's vulnerability policy to a
// govulncheck report (govulncheck -format json, on standard input):
//
//   - a vulnerability our code reaches (a call path to the vulnerable symbol)
//     that has a fixed version fails: upgrade the module or the toolchain;
//   - one without a fix fails unless docs/SECURITY.md lists its id, with the
//     reason it does not affect the service, in a table row that starts with
//     the id in backquotes (| `GO-2026-0001` | module | reason |);
//   - a listed id that the report no longer shows as reachable fails too, so
//     the list never claims more than is true.
//
// govulncheck itself can be told to ignore nothing; this is where a known,
// unfixable advisory is accepted, on purpose and in writing. Imported but
// uncalled vulnerabilities (package or module level) do not fail.
//
// Usage: govulncheck -format json ./... | vulnpolicy docs/SECURITY.md
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strings"
)

func main() {
	os.Exit(run(os.Stdin, os.Args[1:], os.Stdout, os.Stderr))
}

// message is one object of govulncheck's JSON stream; only the parts the
// policy reads.
type message struct {
	OSV *struct {
		ID      string `json:"id"`
		Summary string `json:"summary"`
	} `json:"osv"`
	Finding *struct {
		OSV          string `json:"osv"`
		FixedVersion string `json:"fixed_version"`
		Trace        []struct {
			Module   string `json:"module"`
			Version  string `json:"version"`
			Package  string `json:"package"`
			Function string `json:"function"`
		} `json:"trace"`
	} `json:"finding"`
}

// advisory is a vulnerability the report shows our code calling.
type advisory struct {
	id, summary, module, version, fixed string
}

func run(in io.Reader, args []string, stdout, stderr io.Writer) int {
	if len(args) != 1 {
		fmt.Fprintln(stderr, "usage: govulncheck -format json ./... | vulnpolicy docs/SECURITY.md")
		return 2
	}
	doc, err := os.ReadFile(args[0]) // #nosec G703 -- the path is the one the Makefile passes
	if err != nil {
		fmt.Fprintf(stderr, "vulnpolicy: %v\n", err)
		return 2
	}
	accepted, err := acceptedIDs(string(doc))
	if err != nil {
		fmt.Fprintf(stderr, "vulnpolicy: %s: %v\n", args[0], err)
		return 1
	}
	reached, err := reachable(in)
	if err != nil {
		fmt.Fprintf(stderr, "vulnpolicy: read the govulncheck report: %v\n", err)
		return 2
	}
	failed := false
	for _, a := range reached {
		switch {
		case a.fixed != "":
			failed = true
			fmt.Fprintf(stdout, "FAIL %s %s@%s is called and fixed in %s: %s\n", a.id, a.module, a.version, a.fixed, a.summary)
		case accepted[a.id]:
			fmt.Fprintf(stdout, "ok   %s %s@%s has no fix; %s says why it does not affect us: %s\n", a.id, a.module, a.version, args[0], a.summary)
		default:
			failed = true
			fmt.Fprintf(stdout, "FAIL %s %s@%s is called and has no fix: avoid it in code, or list it in %s with the reason: %s\n", a.id, a.module, a.version, args[0], a.summary)
		}
	}
	for _, id := range sortedKeys(accepted) {
		if !slices.ContainsFunc(reached, func(a advisory) bool { return a.id == id }) {
			failed = true
			fmt.Fprintf(stdout, "FAIL %s is listed in %s, but the report no longer shows it as called: remove it from the list\n", id, args[0])
		}
	}
	if failed {
		return 1
	}
	fmt.Fprintf(stdout, "vulnpolicy: %d called vulnerabilities, none with a fix, each listed in %s\n", len(reached), args[0])
	return 0
}

// reachable reads the report and returns the called vulnerabilities, one
// per id, in the report's order.
func reachable(in io.Reader) ([]advisory, error) {
	dec := json.NewDecoder(bufio.NewReader(in))
	summaries := map[string]string{}
	var out []advisory
	seen := map[string]int{}
	configs := 0
	for {
		var m message
		if err := dec.Decode(&m); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, err
		}
		if m.OSV != nil {
			summaries[m.OSV.ID] = m.OSV.Summary
		}
		if m.Finding == nil || len(m.Finding.Trace) == 0 {
			if m.OSV == nil && m.Finding == nil {
				configs++ // config, progress, SBOM
			}
			continue
		}
		if m.Finding.Trace[0].Function == "" {
			continue // imported, not called
		}
		f := m.Finding
		if i, ok := seen[f.OSV]; ok {
			if out[i].fixed == "" {
				out[i].fixed = f.FixedVersion
			}
			continue
		}
		seen[f.OSV] = len(out)
		out = append(out, advisory{id: f.OSV, module: f.Trace[0].Module, version: f.Trace[0].Version, fixed: f.FixedVersion})
	}
	if configs == 0 {
		return nil, errors.New("no govulncheck output (want -format json)")
	}
	for i := range out {
		out[i].summary = summaries[out[i].id]
	}
	return out, nil
}

// acceptedRow is a table row naming an advisory: | `GO-...` | ... | reason |.
var acceptedRow = regexp.MustCompile("^\\|\\s*`(GO-\\d{4}-\\d{4,})`\\s*\\|(.*)\\|\\s*$")

// acceptedIDs returns the advisories doc lists as accepted. A row must give
// a reason: its last cell must not be empty.
func acceptedIDs(doc string) (map[string]bool, error) {
	ids := map[string]bool{}
	for line := range strings.Lines(doc) {
		m := acceptedRow.FindStringSubmatch(strings.TrimSpace(line))
		if m == nil {
			continue
		}
		cells := strings.Split(m[2], "|")
		if strings.TrimSpace(cells[len(cells)-1]) == "" {
			return nil, fmt.Errorf("%s is listed without a reason", m[1])
		}
		ids[m[1]] = true
	}
	return ids, nil
}

func sortedKeys(m map[string]bool) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
