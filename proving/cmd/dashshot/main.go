// Command dashshot draws the Grafana dashboard's panels from a real
// Prometheus and saves the picture as a PNG (docs/OPERATIONS.md): Grafana
// does not run on this project's machines, so the screenshot of the
// dashboard is this honest stand-in. Every panel of the dashboard JSON is
// queried through Prometheus's HTTP API as Grafana would query it (the
// same PromQL, $__rate_interval filled in) and drawn in the dashboard's
// layout: a time series as lines with its legend, a stat as its last value
// coloured by its thresholds. Headless Chromium renders the page.
//
//	go run ./proving/cmd/dashshot --prometheus http://127.0.0.1:9090 --out docs/dashboard.png
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"html"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/chromedp/chromedp"
)

type dashboard struct {
	Title  string  `json:"title"`
	Panels []panel `json:"panels"`
}

type panel struct {
	Type        string                   `json:"type"`
	Title       string                   `json:"title"`
	Description string                   `json:"description"`
	GridPos     struct{ H, W, X, Y int } `json:"gridPos"`
	Targets     []struct {
		Expr   string `json:"expr"`
		Legend string `json:"legendFormat"`
	} `json:"targets"`
	FieldConfig struct {
		Defaults struct {
			Unit       string `json:"unit"`
			Thresholds struct {
				Steps []struct {
					Color string   `json:"color"`
					Value *float64 `json:"value"`
				} `json:"steps"`
			} `json:"thresholds"`
		} `json:"defaults"`
	} `json:"fieldConfig"`
}

type series struct {
	Metric map[string]string `json:"metric"`
	Values [][2]any          `json:"values"`
	Value  [2]any            `json:"value"`
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "dashshot:", err)
		os.Exit(1)
	}
}

func run() error {
	prom := flag.String("prometheus", "http://127.0.0.1:9090", "Prometheus base URL")
	dashPath := flag.String("dashboard", "observability/grafana/dashboards/oncepay.json", "the dashboard JSON")
	out := flag.String("out", "docs/dashboard.png", "the PNG to write")
	span := flag.Duration("range", 10*time.Minute, "the time range drawn, up to now")
	step := flag.Duration("step", 5*time.Second, "the query step")
	rate := flag.String("rate-interval", "30s", "what $__rate_interval stands for")
	htmlOut := flag.String("html", "", "also write the page here")
	flag.Parse()

	raw, err := os.ReadFile(*dashPath)
	if err != nil {
		return err
	}
	var d dashboard
	if err := json.Unmarshal(raw, &d); err != nil {
		return fmt.Errorf("%s: %w", *dashPath, err)
	}
	end := time.Now()
	start := end.Add(-*span)
	vars := strings.NewReplacer("$__rate_interval", *rate, "$__interval", step.String(), "$__range", span.String())
	var b strings.Builder
	rows := 0
	for _, p := range d.Panels {
		rows = max(rows, p.GridPos.Y+p.GridPos.H)
	}
	fmt.Fprintf(&b, page, html.EscapeString(d.Title), rows, html.EscapeString(d.Title), start.UTC().Format("15:04:05"), end.UTC().Format("15:04:05 UTC, 2006-01-02"))
	for _, p := range d.Panels {
		style := fmt.Sprintf("grid-column:%d / span %d;grid-row:%d / span %d", p.GridPos.X+1, p.GridPos.W, p.GridPos.Y+1, p.GridPos.H)
		if p.Type == "row" {
			fmt.Fprintf(&b, `<div class="row" style="%s">%s</div>`, style, html.EscapeString(p.Title))
			continue
		}
		fmt.Fprintf(&b, `<div class="panel" style="%s"><div class="title">%s</div>`, style, html.EscapeString(p.Title))
		switch p.Type {
		case "stat":
			v, err := instant(*prom, vars.Replace(p.Targets[0].Expr), end)
			if err != nil {
				return fmt.Errorf("panel %q: %w", p.Title, err)
			}
			fmt.Fprintf(&b, `<div class="stat" style="background:%s">%s</div>`, statColor(p, v), format(v, p.FieldConfig.Defaults.Unit))
		default:
			var lines []line
			for _, t := range p.Targets {
				ss, err := rangeQuery(*prom, vars.Replace(t.Expr), start, end, *step)
				if err != nil {
					return fmt.Errorf("panel %q: %w", p.Title, err)
				}
				for _, s := range ss {
					lines = append(lines, toLine(s, t.Legend))
				}
			}
			b.WriteString(chart(lines, start, end, p.FieldConfig.Defaults.Unit, p.GridPos.W, p.GridPos.H))
		}
		b.WriteString(`</div>`)
	}
	b.WriteString("</div></body></html>\n")
	if *htmlOut != "" {
		if err := os.WriteFile(*htmlOut, []byte(b.String()), 0o600); err != nil {
			return err
		}
	}
	return screenshot(b.String(), *out)
}

const page = `<!doctype html><html><head><meta charset="utf-8"><title>%s</title><style>
body{margin:0;background:#111217;color:#ccccdc;font:13px/1.3 "DejaVu Sans",Arial,sans-serif}
h1{font-size:18px;margin:10px 12px 2px;color:#fff}
.sub{margin:0 12px 8px;color:#8e8e9e;font-size:12px}
.grid{display:grid;grid-template-columns:repeat(24,1fr);grid-template-rows:repeat(%d,30px);gap:6px;padding:0 10px 10px}
.panel{background:#181b1f;border:1px solid #2c3235;border-radius:3px;padding:4px 6px;overflow:hidden;display:flex;flex-direction:column}
.title{font-weight:600;color:#e0e0ec;margin-bottom:2px;white-space:nowrap;overflow:hidden;text-overflow:ellipsis}
.row{color:#fff;font-weight:600;font-size:14px;align-self:end;border-bottom:1px solid #2c3235}
.stat{flex:1;display:flex;align-items:center;justify-content:center;font-size:34px;font-weight:600;color:#fff;border-radius:2px}
.legend{font-size:11px;display:flex;flex-wrap:wrap;gap:2px 10px;max-height:44px;overflow:hidden}
.legend span::before{content:"";display:inline-block;width:12px;height:3px;margin-right:4px;vertical-align:middle;background:var(--c)}
svg{flex:1;min-height:0}
</style></head><body><h1>%s</h1>
<div class="sub">Every panel of observability/grafana/dashboards/oncepay.json, queried from Prometheus; %s to %s. Drawn by proving/cmd/dashshot, not by Grafana.</div>
<div class="grid">`

type line struct {
	label string
	ts    []float64
	vs    []float64
}

func toLine(s series, legend string) line {
	label := legend
	for k, v := range s.Metric {
		label = strings.ReplaceAll(label, "{{"+k+"}}", v)
	}
	if label == "" {
		label = fmt.Sprint(s.Metric)
	}
	l := line{label: label}
	for _, pt := range s.Values {
		t, _ := pt[0].(float64)
		str, _ := pt[1].(string)
		v, err := strconv.ParseFloat(str, 64)
		if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
			continue
		}
		l.ts = append(l.ts, t)
		l.vs = append(l.vs, v)
	}
	return l
}

var palette = []string{"#73bf69", "#f2cc0c", "#5794f2", "#ff9830", "#f2495c", "#b877d9", "#8ab8ff", "#fade2a", "#96d98d", "#ffb357", "#ca95e5", "#ff7383"}

func chart(lines []line, start, end time.Time, unit string, w, h int) string {
	sort.SliceStable(lines, func(i, j int) bool { return lines[i].label < lines[j].label })
	// Drop the series that are zero all along: Grafana draws them, but
	// they only crowd the legend of a picture.
	var kept []line
	for _, l := range lines {
		for _, v := range l.vs {
			if v != 0 {
				kept = append(kept, l)
				break
			}
		}
	}
	hidden := len(lines) - len(kept)
	width, height := float64(w*60), float64(h*30-50)
	lo, hi := 0.0, 0.0
	for _, l := range kept {
		for _, v := range l.vs {
			lo, hi = math.Min(lo, v), math.Max(hi, v)
		}
	}
	if hi == lo {
		hi = lo + 1
	}
	t0, t1 := float64(start.Unix()), float64(end.Unix())
	const left, bottom = 52.0, 16.0
	x := func(t float64) float64 { return left + (t-t0)/(t1-t0)*(width-left-4) }
	y := func(v float64) float64 { return 4 + (hi-v)/(hi-lo)*(height-bottom-8) }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg viewBox="0 0 %.0f %.0f" preserveAspectRatio="none">`, width, height)
	for i := 0; i <= 3; i++ {
		v := lo + (hi-lo)*float64(i)/3
		fmt.Fprintf(&b, `<line x1="%.0f" x2="%.0f" y1="%.1f" y2="%.1f" stroke="#2c3235"/><text x="%.0f" y="%.1f" fill="#8e8e9e" font-size="10" text-anchor="end">%s</text>`,
			left, width-4, y(v), y(v), left-4, y(v)+3, html.EscapeString(format(v, unit)))
	}
	for i := 0; i <= 4; i++ {
		t := t0 + (t1-t0)*float64(i)/4
		fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" fill="#8e8e9e" font-size="10" text-anchor="middle">%s</text>`, x(t), height-3, time.Unix(int64(t), 0).UTC().Format("15:04"))
	}
	for i, l := range kept {
		var pts []string
		for j := range l.ts {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(l.ts[j]), y(l.vs[j])))
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="1.6" points="%s"/>`, palette[i%len(palette)], strings.Join(pts, " "))
	}
	b.WriteString(`</svg><div class="legend">`)
	for i, l := range kept {
		fmt.Fprintf(&b, `<span style="--c:%s">%s</span>`, palette[i%len(palette)], html.EscapeString(l.label))
	}
	if hidden > 0 {
		fmt.Fprintf(&b, `<span style="--c:#444">%d series at 0</span>`, hidden)
	}
	b.WriteString(`</div>`)
	return b.String()
}

func statColor(p panel, v float64) string {
	color := "#1f60c4"
	for _, s := range p.FieldConfig.Defaults.Thresholds.Steps {
		if s.Value == nil || v >= *s.Value {
			color = s.Color
		}
	}
	switch color {
	case "green":
		return "#37872d"
	case "orange":
		return "#c4601f"
	case "red":
		return "#c4162a"
	}
	return color
}

func format(v float64, unit string) string {
	if math.IsNaN(v) {
		return "–"
	}
	switch unit {
	case "s":
		if v != 0 && math.Abs(v) < 1 {
			return fmt.Sprintf("%.0f ms", v*1000)
		}
		return fmt.Sprintf("%.1f s", v)
	case "percentunit":
		return fmt.Sprintf("%.0f%%", v*100)
	case "reqps":
		return fmt.Sprintf("%.2g req/s", v)
	case "ops":
		return fmt.Sprintf("%.2g/s", v)
	}
	if v == math.Trunc(v) {
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return fmt.Sprintf("%.2g", v)
}

func get(u string, out any) error {
	res, err := http.Get(u) // #nosec G107 -- the operator's own Prometheus
	if err != nil {
		return err
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		return err
	}
	var body struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(raw, &body); err != nil {
		return fmt.Errorf("%s: %s", res.Status, raw)
	}
	if body.Status != "success" {
		return fmt.Errorf("prometheus: %s", body.Error)
	}
	return json.Unmarshal(body.Data, out)
}

func rangeQuery(prom, q string, start, end time.Time, step time.Duration) ([]series, error) {
	var data struct {
		Result []series `json:"result"`
	}
	err := get(fmt.Sprintf("%s/api/v1/query_range?query=%s&start=%d&end=%d&step=%g", prom, url.QueryEscape(q), start.Unix(), end.Unix(), step.Seconds()), &data)
	return data.Result, err
}

func instant(prom, q string, at time.Time) (float64, error) {
	var data struct {
		Result []series `json:"result"`
	}
	if err := get(fmt.Sprintf("%s/api/v1/query?query=%s&time=%d", prom, url.QueryEscape(q), at.Unix()), &data); err != nil {
		return 0, err
	}
	if len(data.Result) == 0 {
		return math.NaN(), nil
	}
	s, _ := data.Result[0].Value[1].(string)
	return strconv.ParseFloat(s, 64)
}

func screenshot(doc, out string) error {
	f, err := os.CreateTemp("", "dashshot-*.html")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if _, err := f.WriteString(doc); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	path := "chromium"
	if p, err := exec.LookPath("chromium"); err == nil {
		path = p
	}
	alloc, cancel := chromedp.NewExecAllocator(context.Background(), chromedp.ExecPath(path), chromedp.Headless,
		chromedp.NoSandbox, chromedp.DisableGPU, chromedp.WindowSize(1600, 1000))
	defer cancel()
	ctx, cancel := chromedp.NewContext(alloc)
	defer cancel()
	ctx, cancel = context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := chromedp.Do(ctx, chromedp.Navigate("file://"+f.Name())); err != nil {
		return err
	}
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)) // 100: PNG, not JPEG
	if err != nil {
		return err
	}
	return os.WriteFile(out, png, 0o600)
}
