package conformance_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/oncepay/oncepay/proving/conformance"
)

// contractSection is the heading of docs/CONTRACT.md whose table links each
// rule to its case.
const contractSection = "The conformance kit"

// Each case cites docs/CONTRACT.md truly, and the page links every case:
// its anchor is a heading of the page, its quote is written in that section
// (without the page's code and emphasis marks, whitespace aside), the
// page's table of cases names it, and every case that table names exists.
// A rule reworded, a case renamed or one added without its line on the
// page fails here, one line each.
func TestEveryCaseCitesTheContractAndIsLinkedFromIt(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "CONTRACT.md"))
	if err != nil {
		t.Fatal(err)
	}
	sections := splitSections(string(doc))
	table, ok := sections[anchor(contractSection)]
	if !ok {
		t.Fatalf("docs/CONTRACT.md has no section %q linking each rule to its case", contractSection)
	}
	linked := map[string]bool{}
	for _, line := range strings.Split(table, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 4 { // | rule | case |
			continue
		}
		for _, m := range regexp.MustCompile("`([a-z0-9-]+)`").FindAllStringSubmatch(cells[2], -1) {
			linked[m[1]] = true
		}
	}
	cases := map[string]bool{}
	for _, c := range conformance.Cases() {
		if cases[c.Name] {
			t.Errorf("two cases are named %s", c.Name)
		}
		cases[c.Name] = true
		text, ok := sections[c.Anchor]
		if !ok {
			t.Errorf("case %s: docs/CONTRACT.md has no heading #%s", c.Name, c.Anchor)
			continue
		}
		if !strings.Contains(plain(text), plain(c.Quote)) {
			t.Errorf("case %s: its quote is not in docs/CONTRACT.md#%s: %q", c.Name, c.Anchor, c.Quote)
		}
		if !linked[c.Name] {
			t.Errorf("case %s: docs/CONTRACT.md#%s does not link it (a row: | the rule | `%s` |)", c.Name, anchor(contractSection), c.Name)
		}
	}
	for name := range linked {
		if !cases[name] {
			t.Errorf("docs/CONTRACT.md#%s links the case %s, which the kit does not have", anchor(contractSection), name)
		}
	}
	if len(linked) == 0 {
		t.Error("the table of cases links no case: the test reads the wrong section")
	}
}

// splitSections maps each heading's anchor to the text under it, up to the
// next heading.
func splitSections(doc string) map[string]string {
	out := map[string]string{}
	cur := ""
	var b strings.Builder
	fenced := false
	for _, line := range strings.Split(doc, "\n") {
		if strings.HasPrefix(line, "```") {
			fenced = !fenced
		}
		if !fenced && strings.HasPrefix(line, "#") {
			out[cur] = b.String()
			b.Reset()
			cur = anchor(strings.TrimLeft(line, "# "))
			continue
		}
		b.WriteString(line)
		b.WriteByte('\n')
	}
	out[cur] = b.String()
	return out
}

// anchor is GitHub's anchor of a heading: lower case, spaces as dashes,
// punctuation but dashes and underscores left out.
func anchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9':
			b.WriteRune(r)
		}
	}
	return b.String()
}

// plain is s without code and emphasis marks, its whitespace runs one space.
func plain(s string) string {
	s = strings.NewReplacer("`", "", "**", "").Replace(s)
	return strings.Join(strings.Fields(s), " ")
}
