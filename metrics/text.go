package metrics

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

var (
	metricNameRE = regexp.MustCompile(`^[a-zA-Z_:][a-zA-Z0-9_:]*$`)
	labelNameRE  = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)
)

// mustValidName panics on a name Prometheus would reject: metric names are
// fixed in code, so a bad one is a bug to catch at start, not at scrape time.
func mustValidName(name string, labels []string, k kind) {
	if !metricNameRE.MatchString(name) {
		panic(fmt.Sprintf("metrics: invalid metric name %q", name))
	}
	seen := map[string]bool{}
	for _, l := range labels {
		if !labelNameRE.MatchString(l) || strings.HasPrefix(l, "__") || seen[l] || (k == kindHistogram && l == "le") {
			panic(fmt.Sprintf("metrics: invalid or repeated label name %q on %s", l, name))
		}
		seen[l] = true
	}
}

// WriteText writes every family in the Prometheus text exposition format
// 0.0.4: HELP and TYPE lines, then the series sorted by label values;
// families sorted by name, so the output is stable.
func (r *Registry) WriteText(w io.Writer) error {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	fams := make([]*family, 0, len(r.families))
	for _, f := range r.families {
		fams = append(fams, f)
	}
	r.mu.Unlock()
	sort.Slice(fams, func(a, b int) bool { return fams[a].name < fams[b].name })
	bw := bufio.NewWriter(w)
	for _, f := range fams {
		f.writeText(bw)
	}
	return bw.Flush()
}

// writeText writes one family.
func (f *family) writeText(w *bufio.Writer) {
	fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s %s\n", f.name, escapeHelp(f.help), f.name, f.kind)
	if f.fn != nil {
		fmt.Fprintf(w, "%s %s\n", f.name, formatFloat(f.fn()))
		return
	}
	for _, c := range f.sortedChildren() {
		if f.kind != kindHistogram {
			fmt.Fprintf(w, "%s%s %s\n", f.name, labelString(f.labels, c.values, ""), formatFloat(loadFloat(&c.val)))
			continue
		}
		var cum uint64
		for i := range c.counts {
			cum += c.counts[i].Load()
			le := "+Inf"
			if i < len(f.buckets) {
				le = formatFloat(f.buckets[i])
			}
			fmt.Fprintf(w, "%s_bucket%s %d\n", f.name, labelString(f.labels, c.values, le), cum)
		}
		ls := labelString(f.labels, c.values, "")
		fmt.Fprintf(w, "%s_sum%s %s\n%s_count%s %d\n", f.name, ls, formatFloat(loadFloat(&c.sum)), f.name, ls, cum)
	}
}

// sortedChildren returns the series ordered by their label values.
func (f *family) sortedChildren() []*child {
	f.mu.RLock()
	cs := make([]*child, 0, len(f.children))
	for _, c := range f.children {
		cs = append(cs, c)
	}
	f.mu.RUnlock()
	sort.Slice(cs, func(a, b int) bool {
		va, vb := cs[a].values, cs[b].values
		for i := range va {
			if va[i] != vb[i] {
				return va[i] < vb[i]
			}
		}
		return false
	})
	return cs
}

// labelString renders {a="x",b="y"} with le (for histogram buckets) last; ""
// when there are no labels.
func labelString(names, values []string, le string) string {
	if len(names) == 0 && le == "" {
		return ""
	}
	var b strings.Builder
	b.WriteByte('{')
	for i, n := range names {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(n)
		b.WriteString(`="`)
		b.WriteString(escapeLabel(values[i]))
		b.WriteByte('"')
	}
	if le != "" {
		if len(names) > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`le="`)
		b.WriteString(le)
		b.WriteByte('"')
	}
	b.WriteByte('}')
	return b.String()
}

var (
	labelEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)
	helpEscaper  = strings.NewReplacer(`\`, `\\`, "\n", `\n`)
)

// escapeLabel escapes a label value: backslash, double quote and line feed.
func escapeLabel(s string) string { return labelEscaper.Replace(s) }

// escapeHelp escapes HELP text: backslash and line feed.
func escapeHelp(s string) string { return helpEscaper.Replace(s) }

// formatFloat renders a sample value the way Prometheus parses it.
func formatFloat(v float64) string {
	switch {
	case math.IsInf(v, 1):
		return "+Inf"
	case math.IsInf(v, -1):
		return "-Inf"
	case math.IsNaN(v):
		return "NaN"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}
