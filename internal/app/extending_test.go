package app_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// quoted is a fenced block of a page that says where it comes from: the
// line before its fence is <!-- quoted from path/to/file.go -->, both
// indented alike inside a list item.
var quoted = regexp.MustCompile("(?m)^( *)<!-- quoted from ([^ ]+) -->\n *```(?:go|sql)\n((?s:.*?))\n *```")

// The guide to adding an operation teaches with the code that runs: each
// of its Go blocks is quoted from the file it names, piece by piece in
// order (a line "// ..." leaves lines out), so a snippet cannot drift
// from the code or stop compiling while the code does. Every Go block of
// the page is a quotation.
func TestExtendingQuotesTheCode(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	page, err := os.ReadFile(filepath.Join(root, "docs", "EXTENDING.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(page)
	blocks := quoted.FindAllStringSubmatch(doc, -1)
	goBlocks, goQuoted := strings.Count(doc, "```go\n"), 0
	for _, b := range blocks {
		if strings.Contains(b[0], "```go\n") {
			goQuoted++
		}
	}
	if goBlocks != goQuoted || goBlocks == 0 {
		t.Fatalf("docs/EXTENDING.md has %d Go blocks, %d of them quoted; every one says <!-- quoted from FILE --> on the line before", goBlocks, goQuoted)
	}
	for _, b := range blocks {
		indent, file := b[1], b[2]
		snippet := strings.ReplaceAll("\n"+b[3], "\n"+indent, "\n")[1:]
		src, err := os.ReadFile(filepath.Join(root, file))
		if err != nil {
			t.Errorf("docs/EXTENDING.md quotes %s: %v", file, err)
			continue
		}
		code := string(src)
		at := 0
		for _, piece := range pieces(snippet) {
			i := strings.Index(code[at:], piece)
			if i < 0 {
				first, _, _ := strings.Cut(strings.TrimSpace(piece), "\n")
				t.Errorf("docs/EXTENDING.md quotes %s, which does not have (in this order) the lines starting %q", file, first)
				break
			}
			at += i + len(piece)
		}
	}
}

// pieces splits a quotation at its elisions, lines that are "// ..." after
// their indentation.
func pieces(snippet string) []string {
	var out []string
	var cur []string
	for _, line := range strings.Split(snippet, "\n") {
		if strings.TrimSpace(line) == "// ..." {
			if len(cur) > 0 {
				out = append(out, strings.Join(cur, "\n"))
			}
			cur = nil
			continue
		}
		cur = append(cur, line)
	}
	if len(cur) > 0 {
		out = append(out, strings.Join(cur, "\n"))
	}
	return out
}
