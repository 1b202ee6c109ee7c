package registry

import (
	"testing"

	"github.com/lucius-platform/lucius/base/env"
	"github.com/lucius-platform/lucius/core/workflow"
)

func TestLimitsFromEnv(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		env     map[string]string
		want    workflow.Limits
		wantErr bool
	}{
		{"defaults", nil, workflow.Limits{}.WithDefaults(), false},
		{"raised for a benchmark", map[string]string{"LUCIUS_WORKFLOW_MAX_NODES": "20000", "LUCIUS_WORKFLOW_MAX_EDGES": "40000"},
			workflow.Limits{MaxNodes: 20000, MaxEdges: 40000}.WithDefaults(), false},
		{"every variable", map[string]string{"LUCIUS_WORKFLOW_MAX_BYTES": "1000", "LUCIUS_WORKFLOW_MAX_DEPTH": "8",
			"LUCIUS_WORKFLOW_MAX_NODES": "10", "LUCIUS_WORKFLOW_MAX_EDGES": "20", "LUCIUS_WORKFLOW_MAX_FANOUT": "5",
			"LUCIUS_WORKFLOW_MAX_EXPANSION_BYTES": "4096"},
			workflow.Limits{MaxSourceBytes: 1000, MaxDepth: 8, MaxNodes: 10, MaxEdges: 20, MaxFanOut: 5, MaxExpansionBytes: 4096}, false},
		{"not a number", map[string]string{"LUCIUS_WORKFLOW_MAX_NODES": "many"}, workflow.Limits{}.WithDefaults(), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := env.FromMap(tt.env)
			got := LimitsFromEnv(e)
			if got != tt.want {
				t.Errorf("limits %+v, want %+v", got, tt.want)
			}
			if err := e.Err(); (err != nil) != tt.wantErr {
				t.Errorf("reader error %v, want one: %v", err, tt.wantErr)
			}
		})
	}
}
