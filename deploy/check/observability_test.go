package check

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const observabilityDir = "../observability"

// deploy/observability/metrics.txt lists exactly the metrics the dashboards
// and rules use; tools/e2e checks each against a real suite's /metrics.
// LUCIUS_UPDATE=1 rewrites the list.
func TestObservabilityMetricsFileListsWhatTheDashboardsAndRulesUse(t *testing.T) {
	t.Parallel()
	rules, _ := filepath.Glob(filepath.Join(observabilityDir, "prometheus", "*.yaml"))
	dashboards, _ := filepath.Glob(filepath.Join(observabilityDir, "grafana", "*.json"))
	if len(rules) == 0 || len(dashboards) < 2 {
		t.Fatalf("%d rule files and %d dashboards under %s", len(rules), len(dashboards), observabilityDir)
	}
	names, err := ObservabilityMetrics(rules, dashboards)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if !strings.HasPrefix(n, "lucius_") && !strings.HasPrefix(n, "rpc_server_") {
			t.Errorf("%s is neither a Lucius metric nor the gRPC server's", n)
		}
	}
	path := filepath.Join(observabilityDir, "metrics.txt")
	want := FormatMetricsFile(names)
	if os.Getenv("LUCIUS_UPDATE") != "" {
		if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Fatalf("%s is stale; run `LUCIUS_UPDATE=1 make deploy-check` and commit it. The dashboards and rules use:\n%s", path, want)
	}
}

func TestMetricNamesComeFromTheParser(t *testing.T) {
	t.Parallel()
	tests := []struct {
		expr string
		want []string
	}{
		{`sum by (le) (rate(lucius_step_duration_seconds_bucket{handler="OCR"}[5m]))`, []string{"lucius_step_duration_seconds_bucket"}},
		{`max(lucius_outbox_backlog) > 0 and on() sum(rate(lucius_outbox_published_total[5m])) == 0`,
			[]string{"lucius_outbox_backlog", "lucius_outbox_published_total"}},
		{`{__name__="lucius_config_revision"}`, []string{"lucius_config_revision"}},
		// Label names, label values, functions and keywords are not metrics.
		{`label_replace(lucius_bus_queue_depth{entity=~"sum|rate"}, "service", "$1", "entity", "(.*)") unless on (service) vector(1)`,
			[]string{"lucius_bus_queue_depth"}},
	}
	for _, tt := range tests {
		got, err := MetricNames(tt.expr)
		if err != nil {
			t.Fatalf("%s: %v", tt.expr, err)
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("MetricNames(%s) = %v, want %v", tt.expr, got, tt.want)
		}
	}
	if _, err := MetricNames(`sum(rate(lucius_jobs_completed_total[5m])`); err == nil {
		t.Error("an unbalanced expression parsed")
	}
}

func TestDashboardChecksRefuseABadPanel(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for name, body := range map[string]string{
		"no-datasource.json": `{"uid": "u", "title": "t", "panels": [{"id": 1, "type": "timeseries", "title": "p", "targets": [{"expr": "lucius_outbox_backlog"}]}]}`,
		"bad-promql.json":    `{"uid": "u", "title": "t", "panels": [{"id": 1, "type": "timeseries", "title": "p", "datasource": {"uid": "${datasource}"}, "targets": [{"expr": "rate(lucius_outbox_backlog"}]}]}`,
		"same-id.json": `{"uid": "u", "title": "t", "panels": [{"id": 1, "type": "row", "title": "r"},
			{"id": 1, "type": "stat", "title": "p", "datasource": {"uid": "${datasource}"}, "targets": [{"expr": "lucius_outbox_backlog"}]}]}`,
	} {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := DashboardMetrics(path); err == nil {
			t.Errorf("%s passed", name)
		}
	}
}
