package app_test

import (
	"cmp"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// The README and the pages under docs/ cite the code by name, and every
// name they cite exists: a test named in backticks (`TestX`, `TestX/Sub`,
// `FuzzX`, `BenchmarkX`, `ExampleX`) is a function of some _test.go file of
// the repository (proving/, scripts/ and the tools/ module included); a Go
// name of the forms `pkg.Ident`, `pkg.Type.Method` and `Type.Method` (a
// call's parentheses allowed), where pkg is a package of the repository and
// Type one of its types, is declared there (a method or a field of that
// type, or of one it embeds); and every relative link reaches a file, and
// its #anchor a heading of that Markdown file (GitHub's anchors). Forms the
// test cannot tell apart are not read, so it raises no false alarm: names of
// other modules (`http.Server`, `nats.InProcessServer`), `pkg.lower`, which
// is as often an operation, an event or a column (`orders.create`,
// `payment.succeeded`, `payments.status`), and commands. The dated logs
// under docs/log/ are records, not checked. Each stale reference is one
// line, file:line first.
func TestDocsCiteWhatExists(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	code := readRepoCode(t, root)

	pages := []string{filepath.Join(root, "README.md")}
	more, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	pages = append(pages, more...)
	if len(more) == 0 {
		t.Fatal("no pages under docs/: the test reads the wrong folder")
	}

	headings := make(map[string]map[string]bool) // Markdown file -> its anchors
	anchors := func(path string) (map[string]bool, error) {
		if a, ok := headings[path]; ok {
			return a, nil
		}
		doc, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		a := headingAnchors(string(doc))
		headings[path] = a
		return a, nil
	}

	cited := 0
	for _, page := range pages {
		doc, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, page)
		text := blankFences(string(doc))
		for _, span := range codeSpans(text) {
			if problem, checked := code.check(span.text); checked {
				cited++
				if problem != "" {
					t.Errorf("%s:%d: `%s` %s", rel, span.line, span.text, problem)
				}
			}
		}
		for _, l := range links(blankCodeSpans(text)) {
			if problem := checkLink(page, l.text, anchors); problem != "" {
				t.Errorf("%s:%d: link %s %s", rel, l.line, l.text, problem)
			}
		}
	}
	if cited < 100 {
		t.Fatalf("only %d names cited in backticks were checked: the test reads the pages wrong", cited)
	}
}

// repoRoot is the main module's directory, the repository's root.
// The README is a front door, not a manual: what it is, how to run and
// test it, a walk-through and where to start reading, in at most 150
// lines; everything else is a page under docs/ it links to.
func TestReadmeIsAFrontDoor(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile(filepath.Join(repoRoot(t), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(raw), "\n"); n > 150 {
		t.Errorf("README.md has %d lines, at most 150 wanted: move what is not the front door to a page under docs/", n)
	}
}

func repoRoot(t *testing.T) string {
	t.Helper()
	gomod, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	return filepath.Dir(strings.TrimSpace(string(gomod)))
}

// repoCode is what the repository's Go files declare.
type repoCode struct {
	tests    map[string]bool            // Test, Fuzz, Benchmark and Example functions of _test.go files
	packages map[string]map[string]bool // package name -> its top-level functions, types, vars, consts
	members  map[string]map[string]bool // "pkg.Type" -> the type's methods and fields
	embeds   map[string][]string        // "pkg.Type" -> the "pkg.Type"s it embeds
	types    map[string][]string        // type name -> "pkg.Type" of every package declaring it
}

// readRepoCode parses every Go file of the repository (each module, tests
// included; not .data/, bin/ or testdata/).
func readRepoCode(t *testing.T, root string) repoCode {
	t.Helper()
	c := repoCode{
		tests:    make(map[string]bool),
		packages: make(map[string]map[string]bool),
		members:  make(map[string]map[string]bool),
		embeds:   make(map[string][]string),
		types:    make(map[string][]string),
	}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata" || name == "bin" || name == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		c.add(f, strings.HasSuffix(name, "_test.go"))
		return nil
	})
	if err != nil {
		t.Fatalf("read the repository's Go files: %v", err)
	}
	if len(c.tests) == 0 || len(c.packages["app"]) == 0 {
		t.Fatal("found no tests or no package app: the test reads the wrong tree")
	}
	return c
}

// add records one file's declarations.
func (c repoCode) add(f *ast.File, isTest bool) {
	pkg := strings.TrimSuffix(f.Name.Name, "_test")
	if c.packages[pkg] == nil {
		c.packages[pkg] = make(map[string]bool)
	}
	member := func(typ, name string) {
		key := pkg + "." + typ
		if c.members[key] == nil {
			c.members[key] = make(map[string]bool)
			c.types[typ] = append(c.types[typ], key)
		}
		c.members[key][name] = true
	}
	for _, decl := range f.Decls {
		switch d := decl.(type) {
		case *ast.FuncDecl:
			if d.Recv == nil {
				c.packages[pkg][d.Name.Name] = true
				if isTest && testFunc.MatchString(d.Name.Name) {
					c.tests[d.Name.Name] = true
				}
				continue
			}
			if _, typ := typeName(pkg, d.Recv.List[0].Type); typ != "" {
				member(typ, d.Name.Name)
			}
		case *ast.GenDecl:
			for _, spec := range d.Specs {
				switch s := spec.(type) {
				case *ast.TypeSpec:
					typ := s.Name.Name
					c.packages[pkg][typ] = true
					member(typ, "") // the type exists, members or not
					var fields *ast.FieldList
					switch u := s.Type.(type) {
					case *ast.StructType:
						fields = u.Fields
					case *ast.InterfaceType:
						fields = u.Methods
					}
					if fields == nil {
						continue
					}
					for _, field := range fields.List {
						if len(field.Names) == 0 {
							if p, embedded := typeName(pkg, field.Type); embedded != "" {
								c.embeds[pkg+"."+typ] = append(c.embeds[pkg+"."+typ], p+"."+embedded)
							}
						}
						for _, n := range field.Names {
							member(typ, n.Name)
						}
					}
				case *ast.ValueSpec:
					for _, n := range s.Names {
						c.packages[pkg][n.Name] = true
					}
				}
			}
		}
	}
}

// typeName is the package and name of a (receiver or embedded) type
// expression: T, *T, T[P], pkg.T.
func typeName(pkg string, e ast.Expr) (string, string) {
	switch x := e.(type) {
	case *ast.Ident:
		return pkg, x.Name
	case *ast.StarExpr:
		return typeName(pkg, x.X)
	case *ast.IndexExpr:
		return typeName(pkg, x.X)
	case *ast.IndexListExpr:
		return typeName(pkg, x.X)
	case *ast.SelectorExpr:
		if p, ok := x.X.(*ast.Ident); ok {
			return p.Name, x.Sel.Name
		}
	}
	return "", ""
}

// hasMember reports whether the type ("pkg.Type"), or one it embeds, has
// the method or field.
func (c repoCode) hasMember(typ, name string) bool {
	seen := map[string]bool{}
	for stack := []string{typ}; len(stack) > 0; {
		t := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if seen[t] {
			continue
		}
		seen[t] = true
		if c.members[t][name] {
			return true
		}
		stack = append(stack, c.embeds[t]...)
	}
	return false
}

// anyHasMember reports whether a type of that name in any package has the
// method or field.
func (c repoCode) anyHasMember(typ, name string) bool {
	return slices.ContainsFunc(c.types[typ], func(key string) bool { return c.hasMember(key, name) })
}

var (
	// testFunc is a name go test runs.
	testFunc = regexp.MustCompile(`^(?:Test|Fuzz|Benchmark|Example)(?:[A-Z0-9_].*)?$`)
	// citedTest is a cited test, with an optional subtest path.
	citedTest = regexp.MustCompile(`^((?:Test|Fuzz|Benchmark|Example)(?:[A-Z0-9_]\w*)?)(?:/\S*)?$`)
	// goName is a.b or a.b.c (then an optional call's parentheses).
	goName = regexp.MustCompile(`^([A-Za-z_]\w*)\.([A-Za-z_]\w*)(?:\.([A-Za-z_]\w*))?(?:\([^()]*\))?$`)
	// fileSuffixes are what follows the dot of a file name, not a Go name.
	fileSuffixes = []string{"go", "md", "mod", "sum", "sql", "sh", "yaml", "yml", "json", "js", "css", "html", "svg", "png", "conf", "cfg", "txt", "log", "cov", "proto", "toml"}
)

// check reads one span of inline code. It reports whether the span is a
// form it knows, and what is wrong with it ("" when nothing).
func (c repoCode) check(span string) (problem string, checked bool) {
	if m := citedTest.FindStringSubmatch(span); m != nil {
		if !c.tests[m[1]] {
			return "names no test function of the repository", true
		}
		return "", true
	}
	m := goName.FindStringSubmatch(span)
	if m == nil {
		return "", false
	}
	a, b, sel := m[1], m[2], m[3]
	if last := cmp.Or(sel, b); slices.Contains(fileSuffixes, strings.ToLower(last)) {
		return "", false // a file name: main.go, README.md
	}
	decls, isPkg := c.packages[a]
	isPkg = isPkg && a != "main"
	if sel != "" { // pkg.Type.Member
		if !isPkg {
			return "", false
		}
		if !decls[b] {
			return "names " + b + ", which package " + a + " does not declare", true
		}
		if !c.hasMember(a+"."+b, sel) {
			return "names " + sel + ", which " + a + "." + b + " does not have", true
		}
		return "", true
	}
	// pkg.ident in lower case is as often an operation, a column or an
	// event (`orders.create`, `payments.status`): only exported names of a
	// package are read.
	isPkg = isPkg && unicode.IsUpper(rune(b[0]))
	isType := len(c.types[a]) > 0 && unicode.IsUpper(rune(a[0]))
	switch {
	case isPkg && decls[b], isType && c.anyHasMember(a, b):
		return "", true
	case isPkg:
		return "names " + b + ", which package " + a + " does not declare", true
	case isType:
		return "names " + b + ", which no type " + a + " of the repository has", true
	}
	return "", false
}

// span is a piece of a page and the line it starts on.
type span struct {
	text string
	line int
}

// fence opens or closes a fenced code block.
var fence = regexp.MustCompile("^ {0,3}(```+|~~~+)")

// blankFences replaces the lines of fenced code blocks with empty lines,
// so that what they hold is neither inline code nor a link, and line
// numbers stay.
func blankFences(doc string) string {
	lines := strings.Split(doc, "\n")
	open := ""
	for i, l := range lines {
		m := fence.FindStringSubmatch(l)
		switch {
		case open == "" && m != nil:
			open = m[1][:1]
			lines[i] = ""
		case open != "":
			if m != nil && m[1][:1] == open {
				open = ""
			}
			lines[i] = ""
		}
	}
	return strings.Join(lines, "\n")
}

// codeSpans returns the inline code of a page (fences blanked): a run of
// backticks up to the next run of the same length within the paragraph.
func codeSpans(doc string) []span {
	var spans []span
	for i := 0; i < len(doc); {
		if doc[i] != '`' {
			i++
			continue
		}
		n := 0
		for i+n < len(doc) && doc[i+n] == '`' {
			n++
		}
		end := closingTicks(doc, i+n, n)
		if end < 0 {
			i += n
			continue
		}
		text := strings.TrimSpace(strings.ReplaceAll(doc[i+n:end], "\n", " "))
		spans = append(spans, span{text: text, line: 1 + strings.Count(doc[:i], "\n")})
		i = end + n
	}
	return spans
}

// closingTicks finds the run of exactly n backticks that closes a span
// opened before from, within its paragraph; -1 when none.
func closingTicks(doc string, from, n int) int {
	for j := from; j < len(doc); {
		if strings.HasPrefix(doc[j:], "\n\n") {
			return -1
		}
		if doc[j] != '`' {
			j++
			continue
		}
		k := 0
		for j+k < len(doc) && doc[j+k] == '`' {
			k++
		}
		if k == n {
			return j
		}
		j += k
	}
	return -1
}

// blankCodeSpans replaces inline code with spaces, keeping line breaks.
func blankCodeSpans(doc string) string {
	b := []byte(doc)
	for i := 0; i < len(b); {
		if b[i] != '`' {
			i++
			continue
		}
		n := 0
		for i+n < len(b) && b[i+n] == '`' {
			n++
		}
		end := closingTicks(doc, i+n, n)
		if end < 0 {
			i += n
			continue
		}
		for j := i; j < end+n; j++ {
			if b[j] != '\n' {
				b[j] = ' '
			}
		}
		i = end + n
	}
	return string(b)
}

// link is a Markdown link or image: [text](target) or ![alt](target).
var link = regexp.MustCompile(`\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)`)

// links returns the targets of a page's links (fences and code blanked).
func links(doc string) []span {
	var out []span
	for _, m := range link.FindAllStringSubmatchIndex(doc, -1) {
		out = append(out, span{text: doc[m[2]:m[3]], line: 1 + strings.Count(doc[:m[2]], "\n")})
	}
	return out
}

// checkLink reports what is wrong with a link of page ("" when nothing).
// Links with a scheme (https:, mailto:) leave the repository: not checked.
func checkLink(page, target string, anchors func(string) (map[string]bool, error)) string {
	u, err := url.Parse(target)
	if err != nil {
		return "is not a URL: " + err.Error()
	}
	if u.Scheme != "" || u.Host != "" {
		return ""
	}
	path := page
	if u.Path != "" {
		path = filepath.Join(filepath.Dir(page), filepath.FromSlash(u.Path))
		if _, err := os.Stat(path); err != nil {
			return "reaches no file"
		}
	}
	if u.Fragment == "" || !strings.HasSuffix(path, ".md") {
		return ""
	}
	a, err := anchors(path)
	if err != nil {
		return "reaches no file"
	}
	if !a[u.Fragment] {
		return "names no heading of " + filepath.Base(path)
	}
	return ""
}

// heading is an ATX heading line.
var heading = regexp.MustCompile(`^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$`)

// headingAnchors returns the anchors GitHub gives a page's headings: the
// text lower-cased, without Markdown and punctuation, spaces as hyphens;
// a repeated one gets -1, -2, ...
func headingAnchors(doc string) map[string]bool {
	anchors := make(map[string]bool)
	seen := make(map[string]int)
	for _, l := range strings.Split(blankFences(doc), "\n") {
		m := heading.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		slug := slugOf(m[1])
		if n := seen[slug]; n > 0 {
			anchors[slug+"-"+strconv.Itoa(n)] = true
		} else {
			anchors[slug] = true
		}
		seen[slug]++
	}
	return anchors
}

// mdLinkText turns [text](target) into text.
var mdLinkText = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)

// slugOf is GitHub's anchor of a heading's text.
func slugOf(text string) string {
	text = mdLinkText.ReplaceAllString(text, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(text) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.Is(unicode.M, r):
			b.WriteRune(r)
		}
	}
	return b.String()
}
