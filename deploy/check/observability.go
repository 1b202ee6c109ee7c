package check

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"slices"
	"strings"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
)

// MetricNames returns the metric names a PromQL expression selects,
// parsed with Prometheus's own parser.
func MetricNames(expr string) ([]string, error) {
	e, err := parser.NewParser(parser.Options{}).ParseExpr(expr)
	if err != nil {
		return nil, err
	}
	var names []string
	parser.Inspect(e, func(node parser.Node, _ []parser.Node) error {
		if vs, ok := node.(*parser.VectorSelector); ok {
			name := vs.Name
			if name == "" {
				for _, m := range vs.LabelMatchers {
					if m.Name == "__name__" {
						name = m.Value
					}
				}
			}
			if name != "" {
				names = append(names, name)
			}
		}
		return nil
	})
	return names, nil
}

// RuleMetrics reads a Prometheus rule file and returns the metrics its
// expressions use and the series its recording rules define.
func RuleMetrics(path string) (used, recorded []string, err error) {
	groups, errs := rulefmt.ParseFile(path, false, model.UTF8Validation, parser.NewParser(parser.Options{}), slog.New(slog.DiscardHandler))
	if len(errs) > 0 {
		return nil, nil, errors.Join(errs...)
	}
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			if r.Record != "" {
				recorded = append(recorded, r.Record)
			}
			n, err := MetricNames(r.Expr)
			if err != nil {
				return nil, nil, fmt.Errorf("%s: rule %s%s: %w", path, r.Alert, r.Record, err)
			}
			used = append(used, n...)
		}
	}
	return used, recorded, nil
}

// grafanaVariables are Grafana's built-in interval variables, which PromQL
// cannot parse: they stand for a range.
var grafanaVariables = regexp.MustCompile(`\$__(rate_interval|interval|range)\b|\$\{__(rate_interval|interval|range)\}`)

// labelValues is a template variable's query, label_values(metric, label).
var labelValues = regexp.MustCompile(`^label_values\(\s*([a-zA-Z_:][a-zA-Z0-9_:]*)\s*,\s*[a-zA-Z_][a-zA-Z0-9_]*\s*\)$`)

// Dashboard is what the checks read of a Grafana dashboard.
type Dashboard struct {
	UID        string  `json:"uid"`
	Title      string  `json:"title"`
	Panels     []Panel `json:"panels"`
	Templating struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

// Panel is a dashboard panel (rows hold their panels when collapsed).
type Panel struct {
	ID         int               `json:"id"`
	Type       string            `json:"type"`
	Title      string            `json:"title"`
	Datasource map[string]string `json:"datasource"`
	Targets    []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
	Panels []Panel `json:"panels"`
}

// DashboardMetrics reads a Grafana dashboard's JSON and returns the metrics
// its panels and template variables query. Every panel must query
// Prometheus through the ${datasource} variable, and panel ids must be unique.
func DashboardMetrics(path string) ([]string, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var d Dashboard
	if err := json.Unmarshal(raw, &d); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if d.UID == "" || d.Title == "" {
		return nil, fmt.Errorf("%s: a dashboard needs a uid and a title", path)
	}
	var names []string
	var errs []error
	ids := map[int]bool{}
	var walk func(ps []Panel)
	walk = func(ps []Panel) {
		for _, p := range ps {
			if ids[p.ID] {
				errs = append(errs, fmt.Errorf("%s: panel id %d twice", path, p.ID))
			}
			ids[p.ID] = true
			walk(p.Panels)
			if p.Type == "row" {
				continue
			}
			if p.Datasource["uid"] != "${datasource}" {
				errs = append(errs, fmt.Errorf("%s: panel %q does not use the ${datasource} variable", path, p.Title))
			}
			if len(p.Targets) == 0 {
				errs = append(errs, fmt.Errorf("%s: panel %q has no query", path, p.Title))
			}
			for _, t := range p.Targets {
				n, err := MetricNames(grafanaVariables.ReplaceAllString(t.Expr, "5m"))
				if err != nil {
					errs = append(errs, fmt.Errorf("%s: panel %q: %q: %w", path, p.Title, t.Expr, err))
				}
				names = append(names, n...)
			}
		}
	}
	walk(d.Panels)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		q, _ := v.Query.(map[string]any)
		query, _ := q["query"].(string)
		m := labelValues.FindStringSubmatch(query)
		if m == nil {
			errs = append(errs, fmt.Errorf("%s: variable %s: query %q is not label_values(metric, label)", path, v.Name, query))
			continue
		}
		names = append(names, m[1])
	}
	return names, errors.Join(errs...)
}

// ObservabilityMetrics returns, sorted and once each, the metrics that the
// rule files and dashboards given use, less the series the rules record
// (a dashboard may show a recorded series).
func ObservabilityMetrics(rules, dashboards []string) ([]string, error) {
	var names, recorded []string
	var errs []error
	for _, r := range rules {
		n, rec, err := RuleMetrics(r)
		errs = append(errs, err)
		names = append(names, n...)
		recorded = append(recorded, rec...)
	}
	for _, d := range dashboards {
		n, err := DashboardMetrics(d)
		errs = append(errs, err)
		names = append(names, n...)
	}
	names = slices.DeleteFunc(names, func(n string) bool { return slices.Contains(recorded, n) })
	slices.Sort(names)
	return slices.Compact(names), errors.Join(errs...)
}

// MetricsFileHeader opens deploy/observability/metrics.txt.
const MetricsFileHeader = `# Every metric the dashboards (grafana/*.json) and rules (prometheus/*.yaml)
# in this folder use, one a line. deploy/check's test fails when this list
# differs from what their PromQL names (LUCIUS_UPDATE=1 rewrites it), and
# tools/e2e's TestObservabilityMetricsAreExported fails when a process of a
# real suite does not export one of them after a run.
`

// FormatMetricsFile renders the list as deploy/observability/metrics.txt.
func FormatMetricsFile(names []string) string {
	return MetricsFileHeader + strings.Join(names, "\n") + "\n"
}
